//! The load comparison's floor: a bare hyper 1.x server answering each request with a
//! prebuilt `Bytes` and a prebuilt header map read from files, no cache, no auth.
//!
//! `scripts/load-compare.sh` fills a directory with mdproxy's own answers (so this
//! serves exactly the same bytes and headers) and starts it:
//!
//! ```text
//! cargo build --release --example bare_hyper
//! target/release/examples/bare_hyper --listen 127.0.0.1:8099 --dir DIR [--http1-only]
//! ```
//!
//! `DIR/index` has one line per answer, `NAME<TAB>TARGET` (TARGET as requested, e.g.
//! `/api/v1/market/indices`); `DIR/NAME.body` and `DIR/NAME.headers` hold the identity
//! answer (the headers as `curl -D` wrote them, status line included), and
//! `DIR/NAME.gz.body` / `DIR/NAME.gz.headers`, when present, the gzip one, served
//! when the request's `Accept-Encoding` names gzip (likewise `.br` for `br` and
//! `.zstd` for `zstd`, the load tools sending one coding at a time). `Date`, `Content-Length`,
//! `Connection` and `Transfer-Encoding` are left to hyper. Unknown targets get 404.
//! By default it serves HTTP/1.1 and h2c by prior knowledge on one listener (hyper-
//! util's auto builder, as mdproxy does); `--http1-only` serves HTTP/1.1 alone.

use std::collections::HashMap;
use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use http::header::{ACCEPT_ENCODING, HeaderName, HeaderValue};
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;

// The same allocator as the mdproxy binary.
#[path = "support/allocator.rs"]
mod allocator;

/// One prebuilt answer.
struct Answer {
    headers: HeaderMap,
    body: Bytes,
}

/// The identity answer of a target and its compressed ones, if any, by the token
/// `Accept-Encoding` names (`gzip`, `br`, `zstd`).
struct Variants {
    identity: Answer,
    encoded: Vec<(&'static str, Answer)>,
}

/// Each coding and the suffix of its files.
const CODINGS: [(&str, &str); 3] = [("gzip", ".gz"), ("br", ".br"), ("zstd", ".zstd")];

/// Headers hyper writes itself, left out of the prebuilt map.
const SKIPPED: [&str; 4] = ["date", "content-length", "connection", "transfer-encoding"];

/// Reads `NAME.headers` (curl's `-D` dump) into a header map.
fn read_headers(path: &Path) -> Result<HeaderMap, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut map = HeaderMap::new();
    for line in text.lines().skip(1) {
        let line = line.trim_end_matches('\r');
        if line.is_empty() {
            break;
        }
        let Some((name, value)) = line.split_once(':') else {
            return Err(format!("{}: not a header line: {line:?}", path.display()));
        };
        let name = name.trim().to_ascii_lowercase();
        if SKIPPED.contains(&name.as_str()) {
            continue;
        }
        let name = HeaderName::from_bytes(name.as_bytes())
            .map_err(|e| format!("{}: {name:?}: {e}", path.display()))?;
        let value = HeaderValue::from_str(value.trim())
            .map_err(|e| format!("{}: {name}: {e}", path.display()))?;
        map.append(name, value);
    }
    Ok(map)
}

/// Reads `NAME<suffix>.body` and `NAME<suffix>.headers`, if the body exists.
fn read_answer(dir: &Path, name: &str, suffix: &str) -> Result<Option<Answer>, String> {
    let body_path = dir.join(format!("{name}{suffix}.body"));
    if !body_path.exists() {
        return Ok(None);
    }
    let body = std::fs::read(&body_path).map_err(|e| format!("{}: {e}", body_path.display()))?;
    let headers = read_headers(&dir.join(format!("{name}{suffix}.headers")))?;
    Ok(Some(Answer {
        headers,
        body: Bytes::from(body),
    }))
}

/// Reads `DIR/index` and every answer it names.
fn load(dir: &Path) -> Result<HashMap<String, Variants>, String> {
    let index_path = dir.join("index");
    let index = std::fs::read_to_string(&index_path)
        .map_err(|e| format!("{}: {e}", index_path.display()))?;
    let mut answers = HashMap::new();
    for line in index.lines().filter(|l| !l.trim().is_empty()) {
        let Some((name, target)) = line.split_once('\t') else {
            return Err(format!(
                "{}: not NAME<TAB>TARGET: {line:?}",
                index_path.display()
            ));
        };
        let identity = read_answer(dir, name, "")?
            .ok_or_else(|| format!("{}: no {name}.body", dir.display()))?;
        let mut encoded = Vec::new();
        for (coding, suffix) in CODINGS {
            if let Some(answer) = read_answer(dir, name, suffix)? {
                encoded.push((coding, answer));
            }
        }
        answers.insert(target.to_owned(), Variants { identity, encoded });
    }
    if answers.is_empty() {
        return Err(format!("{}: no answers", index_path.display()));
    }
    Ok(answers)
}

/// Whether `Accept-Encoding` names `coding` (no q-value parsing: the load tools send
/// one coding or nothing).
fn accepts(req: &Request<Incoming>, coding: &str) -> bool {
    req.headers()
        .get_all(ACCEPT_ENCODING)
        .iter()
        .any(|v| v.to_str().is_ok_and(|s| s.contains(coding)))
}

/// One request: the prebuilt answer of its target.
fn answer(answers: &HashMap<String, Variants>, req: &Request<Incoming>) -> Response<Full<Bytes>> {
    let target = req.uri().path_and_query().map_or("/", |p| p.as_str());
    let Some(variants) = answers.get(target) else {
        let mut r = Response::new(Full::new(Bytes::from_static(b"not found\n")));
        *r.status_mut() = StatusCode::NOT_FOUND;
        return r;
    };
    let chosen = variants
        .encoded
        .iter()
        .find(|(coding, _)| accepts(req, coding))
        .map_or(&variants.identity, |(_, answer)| answer);
    let mut r = Response::new(Full::new(chosen.body.clone()));
    *r.headers_mut() = chosen.headers.clone();
    r
}

struct Args {
    listen: String,
    dir: PathBuf,
    http1_only: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut listen = None;
    let mut dir = None;
    let mut http1_only = false;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--listen" => listen = args.next(),
            "--dir" => dir = args.next().map(PathBuf::from),
            "--http1-only" => http1_only = true,
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(Args {
        listen: listen.ok_or("--listen ADDR is required")?,
        dir: dir.ok_or("--dir DIR is required")?,
        http1_only,
    })
}

#[tokio::main]
async fn main() -> Result<(), String> {
    let args = parse_args()?;
    let answers = Arc::new(load(&args.dir)?);
    let listener = TcpListener::bind(&args.listen)
        .await
        .map_err(|e| format!("{}: {e}", args.listen))?;
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder.http1().timer(TokioTimer::new());
    builder.http2().timer(TokioTimer::new());
    if args.http1_only {
        builder = builder.http1_only();
    }
    let builder = Arc::new(builder);
    eprintln!(
        "bare_hyper: {} targets on {}",
        answers.len(),
        listener.local_addr().map_err(|e| e.to_string())?
    );
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                eprintln!("accept: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let answers = Arc::clone(&answers);
        let builder = Arc::clone(&builder);
        tokio::spawn(async move {
            let service = service_fn(move |req: Request<Incoming>| {
                let r = answer(&answers, &req);
                async move { Ok::<_, Infallible>(r) }
            });
            let _ = builder
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}
