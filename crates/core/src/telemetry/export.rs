//! The export side: a tracer provider with the configured sampler and
//! `service.name`, a batch span processor on its own thread posting OTLP/HTTP
//! protobuf through our reqwest (blocking, as that thread has no runtime), and the
//! `tracing` layer that turns the spans of [`super::TARGET`] into OpenTelemetry spans.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::HeaderMap;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider, Tracer};
use tracing_subscriber::Layer;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::registry::LookupSpan;

use super::settings::{Sampling, Settings};

/// Why traces could not be started.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// The HTTP client the exporter posts with could not be built.
    #[error("cannot build the OTLP HTTP client: {0}")]
    Client(#[source] reqwest::Error),
    /// The thread that builds that client panicked.
    #[error("the OTLP HTTP client's thread panicked")]
    ClientThread,
    /// The OTLP exporter refused its settings.
    #[error("cannot build the OTLP span exporter: {0}")]
    Exporter(#[source] opentelemetry_otlp::ExporterBuildError),
}

/// Traces on: the provider whose processor exports the spans.
/// [`shutdown`](Self::shutdown) exports what is left within the time it is given;
/// dropping it without does the same within the export timeout. Either turns spans
/// off.
pub struct Telemetry {
    provider: SdkTracerProvider,
    tracer: Tracer,
    settings: Settings,
    shut: bool,
}

impl Telemetry {
    /// Starts exporting with `settings` and turns spans on.
    ///
    /// # Errors
    /// When the HTTP client or the exporter cannot be built.
    pub fn start(settings: &Settings) -> Result<Telemetry, TelemetryError> {
        let poster = Poster::new(settings)?;
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(poster)
            .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
            .with_endpoint(settings.endpoint.clone())
            .with_timeout(settings.timeout)
            .build()
            .map_err(TelemetryError::Exporter)?;
        let root = match settings.root {
            Sampling::AlwaysOn => Sampler::AlwaysOn,
            Sampling::AlwaysOff => Sampler::AlwaysOff,
            Sampling::Ratio(ratio) => Sampler::TraceIdRatioBased(ratio),
        };
        let sampler = if settings.parent_based {
            Sampler::ParentBased(Box::new(root))
        } else {
            root
        };
        let resource = Resource::builder()
            .with_service_name(settings.service_name.clone())
            .with_attribute(opentelemetry::KeyValue::new(
                "service.version",
                crate::build::VERSION,
            ))
            .build();
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_sampler(sampler)
            .with_resource(resource)
            .build();
        let tracer = provider.tracer("mdproxy");
        super::switch::ON.store(true, Ordering::Relaxed);
        Ok(Telemetry {
            provider,
            tracer,
            settings: settings.clone(),
            shut: false,
        })
    }

    /// The layer to add to the subscriber: the spans of [`super::TARGET`] (and
    /// nothing else: no log event becomes a span event) as OpenTelemetry spans.
    pub fn layer<S>(&self) -> impl Layer<S> + use<S>
    where
        S: tracing::Subscriber + for<'a> LookupSpan<'a>,
    {
        tracing_opentelemetry::layer()
            .with_tracer(self.tracer.clone())
            .with_location(false)
            .with_threads(false)
            .with_tracked_inactivity(false)
            .with_filter(Targets::new().with_target(super::TARGET, tracing::Level::TRACE))
    }

    /// One line for the start-up log: where spans go and how they are sampled
    /// (the endpoint without credentials, header names only).
    pub fn describe(&self) -> String {
        let s = &self.settings;
        let sampler = match (s.parent_based, s.root) {
            (true, root) => format!("parent-based, else {root:?}"),
            (false, root) => format!("{root:?}"),
        };
        format!(
            "exporting traces to {} as {} (sampler {sampler}, {} extra header(s))",
            mdproxy_config::redacted_url(&s.endpoint),
            s.service_name,
            s.headers.len()
        )
    }

    /// Exports every span ended so far (tests; shutdown does it by itself).
    pub fn flush(&self) {
        if let Err(e) = self.provider.force_flush() {
            tracing::warn!(error = %e, "flushing the span exporter failed");
        }
    }

    /// Turns spans off and exports what is left, waiting at most `within` (what is
    /// left of the shutdown grace) or the export timeout, whichever is shorter: a
    /// collector that never answers cannot hold the process past its grace. Blocks
    /// the calling thread for that long at most.
    pub fn shutdown(mut self, within: Duration) {
        self.shut = true;
        super::switch::ON.store(false, Ordering::Relaxed);
        let bound = within.min(self.settings.timeout);
        if let Err(e) = self.provider.shutdown_with_timeout(bound) {
            tracing::warn!(
                error = %e,
                within_ms = bound.as_millis() as u64,
                "the last spans were not exported before the shutdown grace ran out"
            );
        }
    }
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        if self.shut {
            return;
        }
        super::switch::ON.store(false, Ordering::Relaxed);
        if let Err(e) = self.provider.shutdown_with_timeout(self.settings.timeout) {
            eprintln!("warning: the span exporter did not shut down cleanly: {e}");
        }
    }
}

/// The exporter's HTTP client: our reqwest (one TLS stack, rustls with ring), the
/// blocking flavour because the batch processor's thread has no runtime. It adds
/// the configured headers, whose values stay marked sensitive.
#[derive(Debug)]
struct Poster {
    client: reqwest::blocking::Client,
    headers: HeaderMap,
    /// Whether the last export failed: a failure is logged when exports start
    /// failing, and a notice when they work again, not once per batch.
    failing: AtomicBool,
}

impl Poster {
    fn new(settings: &Settings) -> Result<Poster, TelemetryError> {
        let timeout = settings.timeout;
        // A blocking client starts a runtime of its own: built on a thread of its
        // own, so that starting traces inside a runtime (tests) is safe.
        let client = std::thread::spawn(move || {
            reqwest::blocking::Client::builder()
                .timeout(timeout)
                .redirect(reqwest::redirect::Policy::none())
                .user_agent(concat!("mdproxy/", env!("CARGO_PKG_VERSION")))
                .build()
        })
        .join()
        .map_err(|_| TelemetryError::ClientThread)?
        .map_err(TelemetryError::Client)?;
        Ok(Poster {
            client,
            headers: settings.headers.iter().cloned().collect(),
            failing: AtomicBool::new(false),
        })
    }

    /// Notes how an export went: one warning when exports start failing (the
    /// collector unreachable, slow or refusing), one notice when they work again.
    fn went(&self, outcome: Result<http::StatusCode, &dyn std::fmt::Display>) {
        let failed = match outcome {
            Ok(status) if status.is_success() => None,
            Ok(status) => Some(format!("the collector answered {status}")),
            Err(e) => Some(e.to_string()),
        };
        match failed {
            Some(error) if !self.failing.swap(true, Ordering::Relaxed) => {
                tracing::warn!(error = %error, "span export failed; spans are dropped until the collector answers");
            }
            None if self.failing.swap(false, Ordering::Relaxed) => {
                tracing::info!("span export works again");
            }
            _ => {}
        }
    }

    /// Posts one export.
    fn post(
        &self,
        parts: http::request::Parts,
        body: Bytes,
    ) -> Result<http::Response<Bytes>, opentelemetry_http::HttpError> {
        let mut headers = parts.headers;
        headers.extend(self.headers.clone());
        let response = self
            .client
            .request(parts.method, parts.uri.to_string())
            .headers(headers)
            .body(body.to_vec())
            .send()?;
        let mut answer = http::Response::builder().status(response.status());
        if let Some(map) = answer.headers_mut() {
            *map = response.headers().clone();
        }
        let body = response.bytes()?;
        Ok(answer.body(body)?)
    }
}

#[async_trait::async_trait]
impl opentelemetry_http::HttpClient for Poster {
    async fn send_bytes(
        &self,
        request: http::Request<Bytes>,
    ) -> Result<http::Response<Bytes>, opentelemetry_http::HttpError> {
        let (parts, body) = request.into_parts();
        let answered = self.post(parts, body);
        match &answered {
            Ok(response) => self.went(Ok(response.status())),
            Err(e) => self.went(Err(e)),
        }
        answered
    }
}
