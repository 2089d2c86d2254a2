//! One simulated-upstream request on the wire: recorder, routing, method and key
//! checks, counters, fault switches, and the upstream's envelope (its own failures as
//! HTTP 200 with `success: false`, and invalid JSON where its docs found some).

use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode, header};
use serde_json::{Value, json};

use super::request::{self, Call, Query, Refusal};
use super::{MAX_LOGGED, Shared, api, stream};
use crate::api::catalog::{STREAM_PATH, catalog};
use crate::api::router::API_PREFIX;
use crate::edge::body::{self, Body};

/// The endpoints whose documented sample could not be parsed as JSON; with dirty
/// bodies on they answer raw control characters inside strings.
pub const DIRTY_PATHS: [&str; 3] = ["/market/hotmap", "/fund/all-etf-list", "/fund/selection"];

/// NestJS's text for a `BadRequestException` without a message.
const BAD_REQUEST: &str = "Bad Request Exception";

/// A JSON response.
fn json_response(status: StatusCode, body: impl Into<Bytes>) -> Response<Body> {
    let mut r = Response::new(body::full(body));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json; charset=utf-8"),
    );
    r
}

/// `{"success":false,"data":null,"message":...}` with `status`.
fn failure(status: StatusCode, message: &str) -> Response<Body> {
    let body = json!({ "success": false, "data": null, "message": message });
    json_response(status, body.to_string())
}

/// Answers one request.
pub(super) async fn handle<B>(shared: &Shared, req: Request<B>) -> Response<Body> {
    shared.raw.record(req.uri());
    let uri = req.uri();
    if uri.path() == "/_sim/stats" {
        return stats_response(shared);
    }
    let cannot = || {
        let target = uri.path_and_query().map_or("/", |p| p.as_str());
        failure(
            StatusCode::NOT_FOUND,
            &format!("Cannot {} {target}", req.method()),
        )
    };
    let Some(api_path) = uri.path().strip_prefix(API_PREFIX) else {
        return cannot();
    };
    let Some(call) = request::route(&shared.router, api_path, uri.query()) else {
        return cannot();
    };
    if !matches!(*req.method(), Method::GET | Method::HEAD) {
        let mut r = failure(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed");
        r.headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        return r;
    }
    if !authorized(shared, req.headers(), &call.query) {
        return failure(StatusCode::UNAUTHORIZED, "Unauthorized");
    }
    // The answer is built first: a request whose parameters the upstream refuses is
    // not counted as served.
    let now = shared.clock.now();
    let answer = if call.template == STREAM_PATH {
        stream::codes(&call).map(|_| Value::Null)
    } else {
        api::answer(&call, now)
    };
    if answer == Err(Refusal::BadRequest) {
        return failure(StatusCode::BAD_REQUEST, BAD_REQUEST);
    }
    count(shared, &call, api_path, uri.query());
    if let Some(early) = faults(shared, api_path).await {
        return early;
    }
    match answer {
        Ok(_) if call.template == STREAM_PATH => stream::respond(shared, &call),
        Ok(data) => success(shared, call.template, data),
        Err(Refusal::NotFound(message)) => failure(StatusCode::NOT_FOUND, &message),
        Err(Refusal::BadRequest) => failure(StatusCode::BAD_REQUEST, BAD_REQUEST),
    }
}

/// Whether the request carries the key in one of the three documented forms:
/// `Authorization: Bearer`, an `x-api-key` header, or an `x-api-key` query parameter.
/// An empty configured key accepts every request.
fn authorized(shared: &Shared, headers: &HeaderMap, query: &Query) -> bool {
    if shared.token.is_empty() {
        return true;
    }
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, key)| key.trim());
    let header_key = headers.get("x-api-key").and_then(|v| v.to_str().ok());
    [bearer, header_key, query.get("x-api-key")]
        .into_iter()
        .flatten()
        .any(|key| shared.token.matches(key))
}

/// Counts a served request: in total, per route, and per raw target.
fn count(shared: &Shared, call: &Call, path: &str, query: Option<&str>) {
    let stats = &shared.stats;
    stats.total.fetch_add(1, Ordering::SeqCst);
    stats.by_route[call.route_id].fetch_add(1, Ordering::SeqCst);
    {
        let mut arrivals = stats.arrivals.lock().expect("stats lock is never poisoned");
        if arrivals.len() < MAX_LOGGED {
            arrivals.push(std::time::Instant::now());
        }
    }
    let target = match query {
        Some(q) => format!("{path}?{q}"),
        None => path.to_owned(),
    };
    *stats
        .by_target
        .lock()
        .expect("stats lock is never poisoned")
        .entry(target)
        .or_default() += 1;
}

/// Applies the fault switches in order: hang, latency, 500s (`fail_next`, error
/// rate), then a failing path's HTTP 200 failure envelope. `Some` ends the request.
async fn faults(shared: &Shared, path: &str) -> Option<Response<Body>> {
    let faults = &shared.faults;
    let stopped = || failure(StatusCode::INTERNAL_SERVER_ERROR, "simulator stopping");
    // Hang while the switch is on (checked every 20 ms), or until the simulator stops.
    while faults.hang.load(Ordering::SeqCst) {
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(20)) => {}
            () = shared.stop.cancelled() => return Some(stopped()),
        }
    }
    let latency = faults.latency_ms.load(Ordering::SeqCst)
        + fastrand::u64(0..=faults.jitter_ms.load(Ordering::SeqCst));
    if latency > 0 {
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(latency)) => {}
            () = shared.stop.cancelled() => return Some(stopped()),
        }
    }
    let failing = faults
        .fail_next
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok()
        || fastrand::u32(0..1_000_000) < faults.error_ppm.load(Ordering::SeqCst);
    if failing {
        return Some(failure(
            StatusCode::INTERNAL_SERVER_ERROR,
            "simulated upstream failure",
        ));
    }
    let paths = faults
        .failing_paths
        .lock()
        .expect("fault lock is never poisoned");
    paths
        .get(path)
        .map(|message| failure(StatusCode::OK, message))
}

/// `{"success":true,"data":...}`; dirty when the switch is on and the route is one
/// of [`DIRTY_PATHS`].
fn success(shared: &Shared, template: &str, mut data: Value) -> Response<Body> {
    let dirty = shared.faults.dirty.load(Ordering::SeqCst) && DIRTY_PATHS.contains(&template);
    if dirty {
        soil(&mut data);
    }
    let body = serde_json::to_vec(&json!({ "success": true, "data": data }))
        .expect("generated JSON serialises");
    json_response(
        StatusCode::OK,
        if dirty { raw_controls(&body) } else { body },
    )
}

/// Puts a newline and a U+0001 into the first names of the payload's rows (its
/// `diff`, `data` or `list`): string items (heat-map rows) or the `name` of objects.
fn soil(data: &mut Value) {
    let list = match data {
        Value::Object(map) => ["diff", "data", "list"]
            .iter()
            .find(|k| map.get(**k).is_some_and(Value::is_array))
            .and_then(|k| map.get_mut(*k))
            .and_then(Value::as_array_mut),
        Value::Array(items) => Some(items),
        _ => None,
    };
    for item in list.into_iter().flatten().take(3) {
        let text = match item {
            Value::String(s) => Some(s),
            Value::Object(map) => map.get_mut("name").and_then(|n| match n {
                Value::String(s) => Some(s),
                _ => None,
            }),
            _ => None,
        };
        if let Some(text) = text {
            let middle = text.chars().count() / 2;
            let at = text
                .char_indices()
                .nth(middle)
                .map_or(text.len(), |(i, _)| i);
            text.insert_str(at, "\n\u{1}");
        }
    }
}

/// Rewrites the escapes of control characters (`\n`, `\u0001`...) in serialised JSON
/// as the raw bytes, which strict JSON forbids inside strings.
fn raw_controls(json: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(json.len());
    let mut i = 0;
    while i < json.len() {
        let rest = &json[i..];
        let control = match rest {
            [b'\\', b'n', ..] => Some((b'\n', 2)),
            [b'\\', b'u', b'0', b'0', hi @ (b'0' | b'1'), lo, ..] => {
                std::str::from_utf8(&[*hi, *lo])
                    .ok()
                    .and_then(|hex| u8::from_str_radix(hex, 16).ok())
                    .map(|byte| (byte, 6))
            }
            // Any other escape (`\\`, `\"`...) is copied whole, so its second
            // character is never read as the start of another escape.
            [b'\\', other, ..] => {
                out.extend_from_slice(&[b'\\', *other]);
                i += 2;
                continue;
            }
            _ => None,
        };
        match control {
            Some((byte, len)) => {
                out.push(byte);
                i += len;
            }
            None => {
                out.push(json[i]);
                i += 1;
            }
        }
    }
    out
}

/// `/_sim/stats`: the total and the count per route that was asked at least once.
fn stats_response(shared: &Shared) -> Response<Body> {
    let names = catalog()
        .endpoints()
        .iter()
        .map(|e| e.path.as_str())
        .chain(request::EXTRA_ROUTES);
    let endpoints: serde_json::Map<String, Value> = names
        .zip(&shared.stats.by_route)
        .filter_map(|(name, n)| {
            let n = n.load(Ordering::SeqCst);
            (n > 0).then(|| (name.to_owned(), n.into()))
        })
        .collect();
    let body =
        json!({ "total": shared.stats.total.load(Ordering::SeqCst), "endpoints": endpoints });
    json_response(StatusCode::OK, body.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dirty_bodies_carry_raw_control_characters() {
        let mut data = json!({ "total": 1, "diff": [{ "name": "沪深300ETF" }] });
        soil(&mut data);
        let clean = serde_json::to_vec(&json!({ "success": true, "data": data })).unwrap();
        let dirty = raw_controls(&clean);
        assert!(serde_json::from_slice::<Value>(&dirty).is_err());
        assert!(dirty.contains(&b'\n') && dirty.contains(&1u8));
        let text = String::from_utf8(dirty).unwrap();
        assert!(text.contains("\"name\":\"沪深30\n\u{1}0ETF\""), "{text}");
    }

    #[test]
    fn only_control_escapes_become_raw() {
        // A backslash followed by n in the text is an escaped backslash, kept as is.
        let clean = br#"{"a":"x\\ny\n\"\u0001\u00e9"}"#;
        let dirty = raw_controls(clean);
        assert_eq!(dirty, b"{\"a\":\"x\\\\ny\n\\\"\x01\\u00e9\"}");
    }

    #[test]
    fn heat_map_rows_are_soiled_too() {
        let mut data = json!({ "hash": "x", "data": ["1|a|0", "2|b|1"] });
        soil(&mut data);
        assert!(data["data"][0].as_str().unwrap().contains('\u{1}'));
        assert_eq!(data["hash"], "x");
    }
}
