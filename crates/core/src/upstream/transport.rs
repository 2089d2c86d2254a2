//! The wire to the upstream: one GET sent and its answer read whole, within the body
//! limit. Direct connections go through hyper-util's pooled client over rustls (the
//! layer reqwest itself is built on, without reqwest's per-request redirect, retry
//! and URL work, which cost a miss a quarter of its instructions: docs/BENCHMARKS.md,
//! "The miss path"); when the environment names a proxy for the upstream
//! (`HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY`, minus `NO_PROXY`), reqwest carries the
//! request, as it always did. What an answer means is decided by the client
//! (`client.rs`), which this module does not know.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, HeaderValue, StatusCode, Uri, Version};
use http_body_util::{BodyExt, Empty};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::proxy::matcher::Matcher;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use rustls::RootCertStore;

/// How long an idle pooled connection is kept.
const POOL_IDLE: Duration = Duration::from_secs(60);

/// The connection settings a transport is built from.
#[derive(Clone, Copy, Debug)]
pub struct Settings {
    /// The TCP connect timeout; a connect that takes longer is a [`WireError::Timeout`].
    pub connect_timeout: Duration,
    /// Idle connections kept per host.
    pub pool_max_idle_per_host: usize,
}

/// Why nothing (or nothing whole) came back.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// The connect took longer than its timeout (or the OS gave up on it).
    #[error("the upstream did not answer in time")]
    Timeout,
    /// Refused, reset, DNS failure, a TLS failure, a body broken off.
    #[error("the upstream is unreachable")]
    Unreachable,
    /// The body announced or ran past `limit` bytes; reading stopped there.
    #[error("the upstream's answer is too large")]
    TooLarge { limit: u64 },
}

/// Why a transport could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// reqwest refused its settings (the proxied path).
    #[error("cannot build the upstream client: {0}")]
    Reqwest(#[source] reqwest::Error),
    /// rustls refused its protocol versions.
    #[error("cannot set up TLS toward the upstream: {0}")]
    Tls(#[source] rustls::Error),
}

/// An answer read whole.
#[derive(Debug)]
pub struct Received {
    pub status: StatusCode,
    pub retry_after: Option<HeaderValue>,
    pub body: Bytes,
    /// The body had no length and no chunked framing, so it ended where the
    /// connection did: a cut is seen only by its JSON not closing.
    pub close_delimited: bool,
}

type Direct = Client<HttpsConnector<HttpConnector>, Empty<Bytes>>;

/// The pooled connections toward one upstream instance.
#[allow(
    clippy::large_enum_variant,
    reason = "one per upstream instance, built once; a box would cost every request a hop"
)]
pub enum Transport {
    Direct(Direct),
    Proxied(reqwest::Client),
}

impl Transport {
    /// The transport for `base`: reqwest when the environment's proxy settings
    /// intercept it (reqwest reads the same ones), else the direct client trusting
    /// the webpki roots.
    ///
    /// # Errors
    /// When TLS or reqwest cannot be set up.
    pub fn new(base: &str, settings: Settings) -> Result<Transport, BuildError> {
        if wants_proxy(&Matcher::from_system(), base) {
            return proxied_client(settings, None).map(Transport::Proxied);
        }
        let roots = RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        };
        direct(settings, roots).map(Transport::Direct)
    }

    /// Whether requests go through a proxy.
    #[cfg(test)]
    fn is_proxied(&self) -> bool {
        matches!(self, Transport::Proxied(_))
    }

    /// GETs `url` with `headers` (`Host` from the URL when they carry none),
    /// reading at most `limit` bytes of body. No whole-request timeout here: the
    /// caller bounds the whole exchange.
    ///
    /// # Errors
    /// A [`WireError`] when no whole answer came back.
    pub async fn get(
        &self,
        url: &str,
        headers: HeaderMap,
        limit: u64,
    ) -> Result<Received, WireError> {
        match self {
            Transport::Direct(client) => {
                let uri = Uri::try_from(url).map_err(|_| WireError::Unreachable)?;
                let mut request = http::Request::new(Empty::new());
                *request.uri_mut() = uri;
                *request.headers_mut() = headers;
                let response = client.request(request).await.map_err(|e| wire_error(&e))?;
                read(response, limit).await
            }
            Transport::Proxied(client) => {
                let response = client.get(url).headers(headers).send();
                let response = response.await.map_err(|e| wire_error(&e))?;
                read(http::Response::from(response), limit).await
            }
        }
    }
}

/// Whether the proxy settings send requests to `base` through a proxy.
fn wants_proxy(matcher: &Matcher, base: &str) -> bool {
    base.parse::<Uri>()
        .is_ok_and(|uri| matcher.intercept(&uri).is_some())
}

/// hyper-util's client over rustls (HTTP/1.1, TCP_NODELAY, the pool's idle limits),
/// plain `http://` allowed for a loopback upstream (validation decides where).
fn direct(settings: Settings, roots: RootCertStore) -> Result<Direct, BuildError> {
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(BuildError::Tls)?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    http.set_connect_timeout(Some(settings.connect_timeout));
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .wrap_connector(http);
    Ok(Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(settings.pool_max_idle_per_host)
        .pool_idle_timeout(POOL_IDLE)
        .pool_timer(TokioTimer::new())
        .build(https))
}

/// reqwest with the environment's proxy (`proxy: None`) or the one given, no
/// redirects followed (following one would cache another host's answer under our
/// key), no `Referer`.
fn proxied_client(
    settings: Settings,
    proxy: Option<reqwest::Proxy>,
) -> Result<reqwest::Client, BuildError> {
    let mut builder = reqwest::Client::builder()
        .connect_timeout(settings.connect_timeout)
        .pool_max_idle_per_host(settings.pool_max_idle_per_host)
        .pool_idle_timeout(POOL_IDLE)
        .tcp_nodelay(true)
        .redirect(reqwest::redirect::Policy::none())
        .referer(false);
    if let Some(proxy) = proxy {
        builder = builder.proxy(proxy);
    }
    builder.build().map_err(BuildError::Reqwest)
}

/// A timeout anywhere in the error's causes (the connect timeout's `TimedOut`) is
/// a timeout; anything else means the upstream is not there.
fn wire_error(e: &(dyn std::error::Error + 'static)) -> WireError {
    let mut cause = Some(e);
    while let Some(error) = cause {
        if error
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut)
        {
            return WireError::Timeout;
        }
        cause = error.source();
    }
    WireError::Unreachable
}

fn is_close_delimited(version: Version, headers: &HeaderMap) -> bool {
    version <= Version::HTTP_11
        && !headers.contains_key(http::header::CONTENT_LENGTH)
        && !headers
            .get(http::header::TRANSFER_ENCODING)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.to_ascii_lowercase().contains("chunked"))
}

fn content_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(http::header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .parse()
        .ok()
}

fn capacity(announced: Option<u64>) -> usize {
    usize::try_from(announced.unwrap_or(0)).unwrap_or(0)
}

fn append(body: &mut BytesMut, chunk: &[u8], limit: u64) -> Result<(), WireError> {
    if (body.len() + chunk.len()) as u64 > limit {
        return Err(WireError::TooLarge { limit });
    }
    body.extend_from_slice(chunk);
    Ok(())
}

/// Reads an answer whole: its head, then its body frame by frame, refused as soon
/// as it passes `limit` bytes (or announces more): nothing past the limit is ever
/// buffered. The body is copied into a buffer of its own: a frame is a slice of the
/// connection's read buffer, and keeping it would pin that whole buffer for as long
/// as the answer is cached (a flood of small 404s took the process from 150 MB to
/// 1 GB when it did).
async fn read<B>(response: http::Response<B>, limit: u64) -> Result<Received, WireError>
where
    B: hyper::body::Body<Data = Bytes> + Unpin,
    B::Error: std::error::Error + 'static,
{
    let (head, mut body) = response.into_parts();
    let announced = content_length(&head.headers);
    if announced.is_some_and(|n| n > limit) {
        return Err(WireError::TooLarge { limit });
    }
    let mut buffer = BytesMut::with_capacity(capacity(announced));
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| wire_error(&e))?;
        if let Ok(data) = frame.into_data() {
            append(&mut buffer, &data, limit)?;
        }
    }
    Ok(Received {
        status: head.status,
        retry_after: head.headers.get(http::header::RETRY_AFTER).cloned(),
        body: buffer.freeze(),
        close_delimited: is_close_delimited(head.version, &head.headers),
    })
}

#[cfg(test)]
mod tests;
