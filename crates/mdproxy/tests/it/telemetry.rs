//! OpenTelemetry traces, checked as a collector sees them: a real OTLP/HTTP receiver
//! on 127.0.0.1:0 inside the test decodes the protobuf the exporter posts
//! (`opentelemetry-proto`'s types) and the tests check the spans, their attributes,
//! parents and links, and the `traceparent` the simulated upstream received. In
//! process (the library's layer on this binary's global subscriber) for the request
//! path, and as `mdproxy serve` and `mdproxy demo` for the wiring (`[telemetry]`,
//! the `OTEL_*` variables, the export at shutdown).

use crate::support;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::trace::v1::Span;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use prost::Message;

use support::{TOKEN, header};

/// One exported span and the `service.name` of its resource.
#[derive(Clone, Debug)]
struct Exported {
    service: String,
    span: Span,
}

impl Exported {
    fn attr(&self, key: &str) -> Option<String> {
        self.span
            .attributes
            .iter()
            .find(|kv| kv.key == key)
            .and_then(|kv| kv.value.as_ref()?.value.as_ref())
            .map(|v| match v {
                Value::StringValue(s) => s.clone(),
                Value::IntValue(i) => i.to_string(),
                Value::BoolValue(b) => b.to_string(),
                Value::DoubleValue(d) => d.to_string(),
                other => format!("{other:?}"),
            })
    }

    fn trace(&self) -> String {
        hex(&self.span.trace_id)
    }

    fn id(&self) -> String {
        hex(&self.span.span_id)
    }

    fn parent(&self) -> String {
        hex(&self.span.parent_span_id)
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A collector: OTLP/HTTP protobuf on `POST /v1/traces`, on a thread and runtime of
/// its own (it outlives each test's runtime), keeping every span and the headers
/// of every export.
#[derive(Clone)]
struct Collector {
    addr: SocketAddr,
    spans: Arc<Mutex<Vec<Exported>>>,
    exports: Arc<Mutex<Vec<http::HeaderMap>>>,
}

impl Collector {
    fn start() -> Collector {
        let spans = Arc::new(Mutex::new(Vec::new()));
        let exports = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let (kept, seen) = (Arc::clone(&spans), Arc::clone(&exports));
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                tx.send(listener.local_addr().unwrap()).unwrap();
                loop {
                    let Ok((stream, _)) = listener.accept().await else {
                        continue;
                    };
                    let (kept, seen) = (Arc::clone(&kept), Arc::clone(&seen));
                    let service = hyper::service::service_fn(move |req| {
                        let (kept, seen) = (Arc::clone(&kept), Arc::clone(&seen));
                        async move {
                            Ok::<_, std::convert::Infallible>(receive(req, &kept, &seen).await)
                        }
                    });
                    tokio::spawn(async move {
                        let _ = hyper::server::conn::http1::Builder::new()
                            .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                            .await;
                    });
                }
            });
        });
        let addr = rx.recv_timeout(Duration::from_secs(10)).unwrap();
        Collector {
            addr,
            spans,
            exports,
        }
    }

    fn base(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn spans(&self) -> Vec<Exported> {
        self.spans.lock().unwrap().clone()
    }

    /// The spans of `trace`.
    fn trace(&self, trace: &str) -> Vec<Exported> {
        self.spans()
            .into_iter()
            .filter(|s| s.trace() == trace)
            .collect()
    }

    /// Waits (bounded) until `found` finds what it looks for among the spans,
    /// asking `flush` to export what is pending first.
    async fn wait_for<T>(&self, flush: impl Fn(), found: impl Fn(&[Exported]) -> Option<T>) -> T {
        for _ in 0..100 {
            flush();
            if let Some(t) = found(&self.spans()) {
                return t;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("the spans looked for never came: {:#?}", self.spans());
    }

    /// The first span `matches` accepts, once it has come (see `wait_for`).
    async fn first(&self, flush: impl Fn(), matches: impl Fn(&Exported) -> bool) -> Exported {
        self.wait_for(flush, |spans| spans.iter().find(|s| matches(s)).cloned())
            .await
    }
}

async fn receive(
    req: http::Request<hyper::body::Incoming>,
    kept: &Mutex<Vec<Exported>>,
    seen: &Mutex<Vec<http::HeaderMap>>,
) -> http::Response<http_body_util::Full<bytes::Bytes>> {
    use http_body_util::BodyExt;
    let reply = |status: u16, body: Vec<u8>| {
        http::Response::builder()
            .status(status)
            .header("content-type", "application/x-protobuf")
            .body(http_body_util::Full::new(bytes::Bytes::from(body)))
            .unwrap()
    };
    if req.method() != http::Method::POST || req.uri().path() != "/v1/traces" {
        return reply(404, Vec::new());
    }
    assert_eq!(req.headers()["content-type"], "application/x-protobuf");
    seen.lock().unwrap().push(req.headers().clone());
    let body = req.into_body().collect().await.unwrap().to_bytes();
    let export = ExportTraceServiceRequest::decode(body).expect("OTLP protobuf");
    let mut kept = kept.lock().unwrap();
    for resource in export.resource_spans {
        let service = resource
            .resource
            .iter()
            .flat_map(|r| &r.attributes)
            .find(|kv| kv.key == "service.name")
            .and_then(|kv| match kv.value.as_ref()?.value.as_ref()? {
                Value::StringValue(s) => Some(s.clone()),
                _ => None,
            })
            .unwrap_or_default();
        for scope in resource.scope_spans {
            for span in scope.spans {
                kept.push(Exported {
                    service: service.clone(),
                    span,
                });
            }
        }
    }
    reply(200, ExportTraceServiceResponse::default().encode_to_vec())
}

/// This binary's traces: one collector, and the library's telemetry layer on the
/// global subscriber (set once; every in-process test shares them and tells its
/// spans apart by trace or request ID).
struct Traced {
    collector: Collector,
    telemetry: mdproxy_core::telemetry::Telemetry,
}

fn traced() -> &'static Traced {
    static TRACED: OnceLock<Traced> = OnceLock::new();
    TRACED.get_or_init(|| {
        use tracing_subscriber::layer::SubscriberExt;
        use tracing_subscriber::util::SubscriberInitExt;
        let collector = Collector::start();
        let config = mdproxy_config::TelemetryConfig {
            endpoint: collector.base(),
            headers: mdproxy_config::Secret::new("x-collector-key=k%20ey"),
            service_name: "mdproxy-test".into(),
            ..Default::default()
        };
        let no_env = |_: &str| None::<String>;
        let settings = mdproxy_core::telemetry::Settings::resolve(&config, &no_env)
            .unwrap()
            .expect("an endpoint turns traces on");
        let telemetry = mdproxy_core::telemetry::Telemetry::start(&settings).unwrap();
        tracing_subscriber::registry()
            .with(telemetry.layer())
            .init();
        Traced {
            collector,
            telemetry,
        }
    })
}

/// A path-only target: its cache key is itself.
const TARGET: &str = "/stock/indicator/financial/600519";

/// Every attribute value of every span: what must never carry a client key.
fn every_value(spans: &[Exported]) -> String {
    spans
        .iter()
        .flat_map(|s| {
            s.span
                .attributes
                .iter()
                .map(|kv| format!("{}={:?}", kv.key, kv.value))
                .chain([s.span.name.clone()])
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A miss that two requests coalesce on: the leader's request span parents the fill,
/// which parents the budget wait and the upstream fetch (whose context the upstream
/// received as `traceparent`); the waiter's request span parents a coalesced wait
/// linked to the fill. The spans carry the route, the cache outcome and its
/// `Cache-Status`, never the client key (sent here in the query); a hit that
/// follows is a span of its own with `HIT`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coalesced_miss_is_traced_from_request_to_upstream() {
    let traced = traced();
    let env = Arc::new(support::start().await);
    env.sim.set_hang(true);
    let leader = {
        let env = Arc::clone(&env);
        tokio::spawn(async move {
            env.get_with(TARGET, &[("x-request-id", "trace-leader")])
                .await
        })
    };
    let store = env.proxy.state().cache().store();
    let key = TARGET;
    assert!(
        support::eventually(Duration::from_secs(20), || env.sim.raw_count() == 1).await,
        "the leader reached the upstream"
    );
    // The waiter authenticates with the query form: its key must not be traced.
    let waiter = {
        let env = Arc::clone(&env);
        tokio::spawn(async move {
            env.client
                .get(env.url(&format!("{TARGET}?x-api-key={TOKEN}")))
                .header("x-request-id", "trace-waiter")
                .send()
                .await
                .unwrap()
        })
    };
    let waiting = || store.waiters(key) == 2;
    assert!(
        support::eventually(Duration::from_secs(20), waiting).await,
        "the second request waits on the first one's fill: {}",
        store.waiters(key)
    );
    env.sim.set_hang(false);
    let leader = leader.await.unwrap();
    let waiter = waiter.await.unwrap();
    assert_eq!(header(&leader, "cache-status"), "mdproxy; fwd=miss; stored");
    assert_eq!(
        header(&waiter, "cache-status"),
        "mdproxy; fwd=miss; collapsed"
    );
    assert_eq!(env.sim.hits("/stock/indicator/financial/{code}"), 1);
    let upstream_saw = env.sim.last_request_headers().unwrap();
    let hit = env.get_with(TARGET, &[("x-request-id", "trace-hit")]).await;
    assert_eq!(header(&hit, "x-cache"), "HIT");

    let flush = || traced.telemetry.flush();
    let by_request_id =
        |id: &'static str| move |s: &Exported| s.attr("mdproxy.request_id").as_deref() == Some(id);
    let leading = traced
        .collector
        .first(flush, by_request_id("trace-leader"))
        .await;
    let waiting = traced
        .collector
        .first(flush, by_request_id("trace-waiter"))
        .await;
    let hitting = traced
        .collector
        .first(flush, by_request_id("trace-hit"))
        .await;

    // The request spans: server spans named by route, with the cache's outcome.
    for (span, cache, detail) in [
        (&leading, "MISS", "mdproxy; fwd=miss; stored"),
        (&waiting, "MISS", "mdproxy; fwd=miss; collapsed"),
        (&hitting, "HIT", "mdproxy; hit; ttl="),
    ] {
        assert_eq!(
            span.span.name,
            "GET /api/v1/stock/indicator/financial/{code}"
        );
        assert_eq!(span.span.kind, SpanKind::Server as i32);
        assert_eq!(span.service, "mdproxy-test");
        assert_eq!(
            span.attr("http.route").unwrap(),
            "/api/v1/stock/indicator/financial/{code}"
        );
        assert_eq!(span.attr("http.request.method").unwrap(), "GET");
        assert_eq!(span.attr("url.path").unwrap(), format!("/api/v1{TARGET}"));
        assert_eq!(span.attr("http.response.status_code").unwrap(), "200");
        assert_eq!(span.attr("mdproxy.cache").unwrap(), cache);
        assert!(
            span.attr("mdproxy.cache_status")
                .unwrap()
                .starts_with(detail)
        );
        assert_eq!(span.attr("mdproxy.cache_key").unwrap(), key);
        assert!(span.parent().is_empty(), "no traceparent came: a root span");
    }
    assert_ne!(leading.trace(), waiting.trace(), "two requests, two traces");

    // The leader's trace: request → fill → budget wait and upstream fetch.
    let trace = traced
        .collector
        .wait_for(flush, |spans| {
            let trace: Vec<_> = spans
                .iter()
                .filter(|s| s.trace() == leading.trace())
                .cloned()
                .collect();
            (trace.len() >= 4).then_some(trace)
        })
        .await;
    let named = |name: &str| {
        trace
            .iter()
            .find(|s| s.span.name == name)
            .unwrap_or_else(|| panic!("no {name} span in {trace:#?}"))
    };
    let fill = named("cache.fill");
    assert_eq!(fill.parent(), leading.id());
    assert_eq!(fill.attr("mdproxy.cache_key").unwrap(), key);
    let budget = named("upstream.budget_wait");
    assert_eq!(budget.parent(), fill.id());
    assert_eq!(budget.attr("mdproxy.priority").unwrap(), "client");
    let fetch = trace
        .iter()
        .find(|s| s.span.kind == SpanKind::Client as i32)
        .expect("an upstream client span");
    assert_eq!(fetch.span.name, "GET");
    assert_eq!(fetch.parent(), fill.id());
    assert!(
        fetch
            .attr("url.full")
            .unwrap()
            .ends_with(&format!("/api/v1{TARGET}")),
        "{:?}",
        fetch.attr("url.full")
    );
    // The upstream was told the fetch's span as the parent of its work.
    assert_eq!(
        upstream_saw["traceparent"].to_str().unwrap(),
        format!("00-{}-{}-01", fetch.trace(), fetch.id())
    );

    // The waiter's trace: its request span parents a wait linked to the fill.
    let wait = traced
        .collector
        .first(flush, |s| {
            s.trace() == waiting.trace() && s.span.name == "cache.coalesced_wait"
        })
        .await;
    assert_eq!(wait.parent(), waiting.id());
    let links: Vec<(String, String)> = wait
        .span
        .links
        .iter()
        .map(|l| (hex(&l.trace_id), hex(&l.span_id)))
        .collect();
    assert_eq!(
        links,
        [(fill.trace(), fill.id())],
        "linked to the fill it waited on"
    );
    assert!(
        traced
            .collector
            .trace(&waiting.trace())
            .iter()
            .all(|s| s.span.name != "cache.fill"),
        "the waiter made no fill"
    );

    // Nothing anywhere carries the client key or the query it came in.
    let values = every_value(&traced.collector.spans());
    assert!(
        !values.contains(TOKEN) && !values.contains("x-api-key"),
        "{values}"
    );
    // The exporter sent the configured header, percent-decoded.
    let exports = traced.collector.exports.lock().unwrap().clone();
    assert!(exports.iter().all(|h| h["x-collector-key"] == "k ey"));
}

/// An incoming sampled `traceparent` is continued: the request span is its child and
/// the upstream hears of the same trace; a later version (`cc-…-01-<more>`) is read
/// as W3C Trace Context asks; an unsampled one is honoured too: no span is exported
/// for it, yet the upstream is told the trace (unsampled) all the same.
/// An MCP tool call is traced as a REST request is: the request's server span, a
/// `tools/call <tool>` span under it with the tool and its outcome, and the fill
/// and the upstream fetch it caused under that, in the client's trace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_call_is_traced_under_its_request() {
    let traced = traced();
    let env = support::start_with(|_| {}, |c| c.mcp.enabled = true, None).await;
    let traceparent = "00-3af7651916cd43dd8448eb211c80319c-e7ad6b7169203331-01";
    let trace = &traceparent[3..35];
    let r = env
        .client
        .post(env.proxy.base_url().replace("/api/v1", "/mcp"))
        .header("x-api-key", TOKEN)
        .header("traceparent", traceparent)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", "get_market_indices")
        .json(
            &serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
                "name": "get_market_indices", "arguments": {},
                "_meta": {
                    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                    "io.modelcontextprotocol/clientInfo": {"name": "traced", "version": "1"},
                    "io.modelcontextprotocol/clientCapabilities": {}
                }
            }}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let flush = || traced.telemetry.flush();
    let named = |name: &'static str| move |s: &Exported| s.trace() == trace && s.span.name == name;
    let call = traced
        .collector
        .first(flush, named("tools/call get_market_indices"))
        .await;
    let request = traced
        .collector
        .first(flush, |s| {
            s.trace() == trace && s.span.kind == SpanKind::Server as i32
        })
        .await;
    assert_eq!(call.parent(), request.id(), "a child of its request");
    assert_eq!(
        call.attr("gen_ai.tool.name").as_deref(),
        Some("get_market_indices")
    );
    assert_eq!(call.attr("mcp.method.name").as_deref(), Some("tools/call"));
    assert_eq!(call.attr("mdproxy.outcome").as_deref(), Some("miss"));
    let fill = traced.collector.first(flush, named("cache.fill")).await;
    assert_eq!(
        fill.parent(),
        call.id(),
        "the fill the call caused is its child"
    );
    let fetch = traced.collector.first(flush, named("GET")).await;
    assert!(
        [fill.id(), call.id()].contains(&fetch.parent()),
        "the upstream fetch is under the call"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_incoming_traceparent_is_honoured() {
    let traced = traced();
    let env = support::start().await;
    let flush = || traced.telemetry.flush();
    let cases = [
        (
            "/stock/kline?code=000001&period=week",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        ),
        (
            "/stock/kline?code=600036&period=week",
            "cc-1af7651916cd43dd8448eb211c80319c-c7ad6b7169203331-01-future-fields",
        ),
    ];
    for (target, traceparent) in cases {
        let trace = &traceparent[3..35];
        let parent = &traceparent[36..52];
        let r = env.get_with(target, &[("traceparent", traceparent)]).await;
        assert_eq!(r.status(), 200);
        let upstream_saw = env.sim.last_request_headers().unwrap();
        let request = traced
            .collector
            .first(flush, |s| {
                s.trace() == trace && s.span.kind == SpanKind::Server as i32
            })
            .await;
        assert_eq!(request.parent(), parent, "a child of the client's span");
        let sent = upstream_saw["traceparent"].to_str().unwrap().to_owned();
        assert!(
            sent.starts_with(&format!("00-{trace}-")) && sent.ends_with("-01"),
            "{sent}"
        );
        let fetch = traced
            .collector
            .first(flush, |s| {
                s.trace() == trace && s.span.kind == SpanKind::Client as i32
            })
            .await;
        assert_eq!(sent, format!("00-{trace}-{}-01", fetch.id()));
    }

    // Not sampled by the client: nothing exported, the decision passed on.
    let unsampled = "00-2af7651916cd43dd8448eb211c80319c-d7ad6b7169203331-00";
    let r = env
        .get_with(
            "/stock/kline?code=000858&period=week",
            &[("traceparent", unsampled)],
        )
        .await;
    assert_eq!(r.status(), 200);
    let sent = env.sim.last_request_headers().unwrap()["traceparent"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        sent.starts_with("00-2af7651916cd43dd8448eb211c80319c-") && sent.ends_with("-00"),
        "{sent}"
    );
    // A later request's spans arriving shows the export has caught up.
    let r = env
        .get_with(
            "/stock/detail/600519",
            &[("x-request-id", "trace-after-unsampled")],
        )
        .await;
    assert_eq!(r.status(), 200);
    traced
        .collector
        .wait_for(flush, |spans| {
            spans
                .iter()
                .any(|s| s.attr("mdproxy.request_id").as_deref() == Some("trace-after-unsampled"))
                .then_some(())
        })
        .await;
    assert!(
        traced
            .collector
            .trace("2af7651916cd43dd8448eb211c80319c")
            .is_empty(),
        "an unsampled trace is not exported"
    );
    // A malformed traceparent (short trace ID) is ignored: a root span.
    let r = env
        .get_with(
            "/stock/detail/000001",
            &[
                ("traceparent", "00-abc-b7ad6b7169203331-01"),
                ("x-request-id", "trace-malformed"),
            ],
        )
        .await;
    assert_eq!(r.status(), 200);
    let root = traced
        .collector
        .first(flush, |s| {
            s.attr("mdproxy.request_id").as_deref() == Some("trace-malformed")
        })
        .await;
    assert!(root.parent().is_empty());
}

/// The environment of a child process: none of the test's own `MDPROXY_*` or
/// `OTEL_*` variables.
fn hermetic(command: &mut tokio::process::Command) -> &mut tokio::process::Command {
    for (name, _) in std::env::vars_os() {
        let text = name.to_string_lossy();
        if text.starts_with("MDPROXY_") || text.starts_with("OTEL_") {
            command.env_remove(&name);
        }
    }
    command
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
}

/// Reads the child's stdout until a line starts with `prefix`; returns the rest.
async fn banner(child: &mut tokio::process::Child, prefix: &str) -> String {
    use tokio::io::AsyncBufReadExt;
    let stdout = child.stdout.take().unwrap();
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    let found = async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if let Some(rest) = line.strip_prefix(prefix) {
                return rest.to_owned();
            }
        }
        panic!("the process ended before printing {prefix:?}");
    };
    let rest = tokio::time::timeout(Duration::from_secs(20), found)
        .await
        .unwrap();
    // Drained so the pipe never fills.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    rest
}

/// `serve` with `[telemetry]` in its file exports its spans (the last ones when it
/// stops), continuing a client's trace, and tells the upstream of it.
#[tokio::test]
async fn serve_exports_spans_configured_by_its_file() {
    let collector = Collector::start();
    let sim = mdproxy_sim::start(&support::sim_config(), support::saturday())
        .await
        .unwrap();
    let (dir, path) = support::serve_toml(
        "mdproxy-telemetry",
        &format!(
            "[server]\nlisten = \"127.0.0.1:0\"\nreload_poll_ms = 0\n[auth]\ntokens = [\"{TOKEN}\"]\n[upstream]\nbase_url = \"{}\"\ntoken = \"{}\"\nprobe_target = \"\"\n[scheduler]\nenabled = false\n[telemetry]\nendpoint = \"{}\"\nservice_name = \"md-serve\"\n",
            sim.base_url(),
            support::UPSTREAM_TOKEN,
            collector.base()
        ),
    );
    let mut child = hermetic(&mut tokio::process::Command::new(env!(
        "CARGO_BIN_EXE_mdproxy"
    )))
    .args(["serve", "--config"])
    .arg(&path)
    .spawn()
    .unwrap();
    let base = banner(&mut child, "mdproxy serving ").await;
    let base = base.split_whitespace().next().unwrap().to_owned();
    let mut serve = support::Watched::new(child);
    let traceparent = "00-3af7651916cd43dd8448eb211c80319c-e7ad6b7169203331-01";
    let r = support::client()
        .get(format!("{base}/stock/detail/600519"))
        .bearer_auth(TOKEN)
        .header("traceparent", traceparent)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let sent = sim.last_request_headers().unwrap()["traceparent"]
        .to_str()
        .unwrap()
        .to_owned();
    serve.stop().await;
    // Exported at the latest when it stopped.
    let trace = collector.trace("3af7651916cd43dd8448eb211c80319c");
    let request = trace
        .iter()
        .find(|s| s.span.kind == SpanKind::Server as i32)
        .unwrap_or_else(|| panic!("the request span: {trace:#?}"));
    assert_eq!(request.service, "md-serve");
    assert_eq!(request.parent(), "e7ad6b7169203331");
    assert_eq!(request.span.name, "GET /api/v1/stock/detail/{code}");
    let fetch = trace
        .iter()
        .find(|s| s.span.kind == SpanKind::Client as i32)
        .expect("the upstream fetch span");
    assert_eq!(sent, format!("00-{}-{}-01", fetch.trace(), fetch.id()));
    std::fs::remove_dir_all(&dir).ok();
}

/// `demo` exports too, configured by the standard variables alone
/// (`OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_SERVICE_NAME`, `OTEL_EXPORTER_OTLP_HEADERS`),
/// and never logs the headers' secret.
#[tokio::test]
async fn demo_exports_spans_configured_by_otel_variables() {
    let collector = Collector::start();
    let mut child = hermetic(&mut tokio::process::Command::new(env!(
        "CARGO_BIN_EXE_mdproxy"
    )))
    .args(["demo", "--listen", "127.0.0.1:0", "--admin-listen", ""])
    .env("OTEL_EXPORTER_OTLP_ENDPOINT", collector.base())
    .env("OTEL_SERVICE_NAME", "md-demo")
    .env(
        "OTEL_EXPORTER_OTLP_HEADERS",
        "authorization=Bearer%20otel-s3cret",
    )
    .spawn()
    .unwrap();
    let base = banner(&mut child, "mdproxy demo: proxy ").await;
    let base = base.split_whitespace().next().unwrap().to_owned();
    let mut demo = support::Watched::new(child);
    let r = support::client()
        .get(format!("{base}/stock/detail/600519"))
        .bearer_auth("demo-token")
        .header("x-request-id", "demo-traced")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    demo.stop().await;
    let spans = collector.spans();
    let request = spans
        .iter()
        .find(|s| s.attr("mdproxy.request_id").as_deref() == Some("demo-traced"))
        .unwrap_or_else(|| panic!("the demo's request span: {spans:#?}"));
    assert_eq!(request.service, "md-demo");
    let exports = collector.exports.lock().unwrap().clone();
    assert!(!exports.is_empty());
    assert!(
        exports
            .iter()
            .all(|h| h["authorization"] == "Bearer otel-s3cret")
    );
    let text = demo.seen.join("\n");
    assert!(text.contains("telemetry: exporting traces to"), "{text}");
    assert!(!text.contains("otel-s3cret"), "{text}");
}

/// `serve` in front of a simulator, exporting to `endpoint` with `extra` lines in
/// its `[telemetry]` and a shutdown grace of 1 s; the simulator, the proxy's base
/// URL, the watched child and the scratch directory.
async fn serve_traced(
    endpoint: &str,
    extra: &str,
    env: &[(&str, &str)],
) -> (
    mdproxy_sim::SimHandle,
    String,
    support::Watched,
    std::path::PathBuf,
) {
    let sim = mdproxy_sim::start(&support::sim_config(), support::saturday())
        .await
        .unwrap();
    let (dir, path) = support::serve_toml(
        &format!("mdproxy-telemetry-{}", fastrand::u32(..)),
        &format!(
            "[server]\nlisten = \"127.0.0.1:0\"\nreload_poll_ms = 0\nshutdown_grace_ms = 1000\n[auth]\ntokens = [\"{TOKEN}\"]\n[upstream]\nbase_url = \"{}\"\ntoken = \"{}\"\nprobe_target = \"\"\n[scheduler]\nenabled = false\n[telemetry]\nendpoint = \"{endpoint}\"\n{extra}",
            sim.base_url(),
            support::UPSTREAM_TOKEN,
        ),
    );
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_mdproxy"));
    hermetic(&mut command)
        .args(["serve", "--config"])
        .arg(&path);
    for (name, value) in env {
        command.env(name, value);
    }
    let mut child = command.spawn().unwrap();
    let base = banner(&mut child, "mdproxy serving ").await;
    let base = base.split_whitespace().next().unwrap().to_owned();
    (sim, base, support::Watched::new(child), dir)
}

/// A collector that accepts connections and never answers cannot hold shutdown:
/// with an export timeout of 120 s, `serve` exits within its 1 s grace and the
/// test's 20 s wait for an exit, and says the last spans were not exported.
#[tokio::test]
async fn a_collector_that_never_answers_cannot_hold_shutdown() {
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = silent.local_addr().unwrap();
    // Accepts and holds every connection, answering nothing, until the test ends.
    std::thread::spawn(move || {
        let held: Vec<_> = silent.incoming().take(64).collect();
        drop(held);
    });
    let (_sim, base, mut serve, dir) =
        serve_traced(&format!("http://{addr}"), "timeout_ms = 120000\n", &[]).await;
    let r = support::client()
        .get(format!("{base}/stock/detail/600519"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    serve.stop().await;
    assert!(
        serve
            .seen
            .iter()
            .any(|l| l.contains("the last spans were not exported")),
        "{:#?}",
        serve.seen
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// Exports that keep failing (nothing listens at the collector's address) are
/// logged once, when they start failing, not once per batch.
#[tokio::test]
async fn a_failing_collector_is_logged_once() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = closed.local_addr().unwrap();
    drop(closed);
    let (_sim, base, mut serve, dir) = serve_traced(
        &format!("http://{addr}"),
        "",
        &[("OTEL_BSP_SCHEDULE_DELAY", "50")],
    )
    .await;
    for code in support::listed_codes(4) {
        let r = support::client()
            .get(format!("{base}/stock/detail/{code}"))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        // Each request's spans are a batch of their own, exported and failing.
        serve
            .line_where(|l| l.contains(&format!("/stock/detail/{code}")))
            .await;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    serve.stop().await;
    let failures = serve
        .seen
        .iter()
        .filter(|l| l.contains("span export failed"))
        .count();
    assert_eq!(failures, 1, "{:#?}", serve.seen);
    std::fs::remove_dir_all(&dir).ok();
}
