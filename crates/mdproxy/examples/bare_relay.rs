//! The miss path's floor on mdproxy's stack: a bare hyper server relaying every
//! request to the upstream through hyper-util's pooled client, keep-alive, and
//! answering with the upstream's status, `Content-Type` and body. No cache, no
//! auth, no validation, no envelope check, no single flight: what any proxy built
//! on hyper and tokio does for a miss at the least.
//!
//! `scripts/miss-cost.sh` counts its instructions a miss beside mdproxy's and
//! nginx's (`ANCHORS=nginx,relay`), and `scripts/load-compare.sh` floods it beside
//! them (`ONLY=...,relay`):
//!
//! ```text
//! cargo build --release --example bare_relay
//! target/release/examples/bare_relay --listen 127.0.0.1:8098 \
//!     --upstream http://127.0.0.1:9090 --token sim-upstream-token
//! ```
//!
//! A request's path and query go to `--upstream` as they came (`/api/v1/...` on
//! both sides), with the upstream token as a bearer token. HTTP/1.1 and h2c by
//! prior knowledge on one listener, as mdproxy serves them.

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http::header::{AUTHORIZATION, CONTENT_TYPE, HeaderValue};
use http::{Request, Response, StatusCode, Uri};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;

// The same allocator as the mdproxy binary, so the floor differs only by the work.
#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[cfg(all(feature = "mimalloc", not(feature = "jemalloc")))]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// What every request shares: the pooled client, where it sends, and how it signs.
struct Relay {
    client: Client<HttpConnector, Empty<Bytes>>,
    /// `http://host:port`, no trailing slash.
    upstream: String,
    bearer: HeaderValue,
}

/// One request: the upstream's answer to the same path and query, or a 502.
async fn relay(relay: &Relay, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let target = req.uri().path_and_query().map_or("/", |p| p.as_str());
    let Ok(uri) = format!("{}{target}", relay.upstream).parse::<Uri>() else {
        return status_only(StatusCode::BAD_REQUEST);
    };
    let mut ask = Request::new(Empty::new());
    *ask.uri_mut() = uri;
    ask.headers_mut()
        .insert(AUTHORIZATION, relay.bearer.clone());
    let Ok(answer) = relay.client.request(ask).await else {
        return status_only(StatusCode::BAD_GATEWAY);
    };
    let (parts, body) = answer.into_parts();
    let Ok(body) = body.collect().await else {
        return status_only(StatusCode::BAD_GATEWAY);
    };
    let mut response = Response::new(Full::new(body.to_bytes()));
    *response.status_mut() = parts.status;
    if let Some(kind) = parts.headers.get(CONTENT_TYPE) {
        response.headers_mut().insert(CONTENT_TYPE, kind.clone());
    }
    response
}

fn status_only(status: StatusCode) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::new()));
    *response.status_mut() = status;
    response
}

struct Args {
    listen: String,
    upstream: String,
    token: String,
}

fn parse_args() -> Result<Args, String> {
    let (mut listen, mut upstream, mut token) = (None, None, None);
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--listen" => listen = args.next(),
            "--upstream" => upstream = args.next(),
            "--token" => token = args.next(),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(Args {
        listen: listen.ok_or("--listen ADDR is required")?,
        upstream: upstream
            .ok_or("--upstream http://HOST:PORT is required")?
            .trim_end_matches('/')
            .to_owned(),
        token: token.unwrap_or_default(),
    })
}

#[tokio::main]
async fn main() -> Result<(), String> {
    let args = parse_args()?;
    let bearer = HeaderValue::from_str(&format!("Bearer {}", args.token))
        .map_err(|_| "--token: not a header value".to_owned())?;
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    let client = Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(usize::MAX)
        .build(connector);
    let relay_state = Arc::new(Relay {
        client,
        upstream: args.upstream,
        bearer,
    });
    let listener = TcpListener::bind(&args.listen)
        .await
        .map_err(|e| format!("{}: {e}", args.listen))?;
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder.http1().timer(TokioTimer::new());
    builder.http2().timer(TokioTimer::new());
    let builder = Arc::new(builder);
    eprintln!("bare relay listening on {}", args.listen);
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        let (builder, state) = (Arc::clone(&builder), Arc::clone(&relay_state));
        tokio::spawn(async move {
            let service = service_fn(move |req| {
                let state = Arc::clone(&state);
                async move { Ok::<_, Infallible>(relay(&state, req).await) }
            });
            let _ = builder
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}
