//! The miss path's floors: a bare server relaying every request to the upstream
//! over pooled keep-alive connections and answering with the upstream's status,
//! `Content-Type` and body. No cache, no auth, no validation, no envelope check, no
//! single flight. By default it is hyper-util's server and hyper-util's client,
//! HTTP/1.1 and h2c by prior knowledge on one listener as mdproxy serves them: what
//! any proxy on hyper and tokio does for a miss at the least. With `--raw` it is
//! tokio and httparse without hyper ([`raw`]): an upper bound for a server side
//! written by hand.
//!
//! `scripts/miss-cost.sh` counts their instructions a miss beside mdproxy's and
//! nginx's (`ANCHORS=nginx,relay,raw`), and `scripts/load-compare.sh` floods them
//! (`relay`, `raw` in `ONLY`):
//!
//! ```text
//! cargo build --release --example bare_relay
//! target/release/examples/bare_relay --listen 127.0.0.1:8098 \
//!     --upstream 127.0.0.1:9090 --token sim-upstream-token [--raw]
//! ```
//!
//! A request's path and query go to `--upstream` as they came (`/api/v1/...` on
//! both sides), with the upstream token as a bearer token.

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

mod raw;

// The same allocator as the mdproxy binary.
#[path = "../support/allocator.rs"]
mod allocator;

/// What every request shares: the pooled client, where it sends, and how it signs.
struct Relay {
    client: Client<HttpConnector, Empty<Bytes>>,
    /// `http://host:port`.
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
    /// `HOST:PORT`.
    upstream: String,
    token: String,
    raw: bool,
}

fn parse_args() -> Result<Args, String> {
    let (mut listen, mut upstream, mut token, mut raw) = (None, None, None, false);
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--listen" => listen = args.next(),
            "--upstream" => upstream = args.next(),
            "--token" => token = args.next(),
            "--raw" => raw = true,
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(Args {
        listen: listen.ok_or("--listen ADDR is required")?,
        upstream: upstream.ok_or("--upstream HOST:PORT is required")?,
        token: token.unwrap_or_default(),
        raw,
    })
}

#[tokio::main]
async fn main() -> Result<(), String> {
    let args = parse_args()?;
    let listener = TcpListener::bind(&args.listen)
        .await
        .map_err(|e| format!("{}: {e}", args.listen))?;
    let kind = if args.raw { "raw" } else { "bare" };
    eprintln!("{kind} relay listening on {}", args.listen);
    if args.raw {
        raw::serve(listener, &args.upstream, &args.token).await
    } else {
        serve_hyper(listener, args).await
    }
}

/// The hyper relay: hyper-util's server in front of hyper-util's pooled client.
async fn serve_hyper(listener: TcpListener, args: Args) -> Result<(), String> {
    let bearer = HeaderValue::from_str(&format!("Bearer {}", args.token))
        .map_err(|_| "--token: not a header value".to_owned())?;
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    let client = Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(usize::MAX)
        .build(connector);
    let relay_state = Arc::new(Relay {
        client,
        upstream: format!("http://{}", args.upstream),
        bearer,
    });
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder.http1().timer(TokioTimer::new());
    builder.http2().timer(TokioTimer::new());
    let builder = Arc::new(builder);
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
