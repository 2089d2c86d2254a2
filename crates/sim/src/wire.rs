//! One simulated-upstream request on the wire: recorder, routing, method and key
//! checks, counters, fault switches, and the upstream's envelope (its own failures as
//! HTTP 200 with `success: false`, and invalid JSON where its docs found some).

use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode, header};
use serde_json::{Value, json};

use super::body::{self, Body};
use super::request::{self, Call, Query, Refusal};
use super::state::{MAX_LOGGED, MAX_TARGETS, Shared};
use super::{api, docs, stream};

/// The stream's path.
const STREAM_PATH: &str = "/stock/indicator/realtime/sse";
/// Where every path of the API lives.
const API_PREFIX: &str = "/api/v1";

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
    let message = Value::from(message);
    json_response(status, envelope(false, &Value::Null, Some(&message)))
}

/// The upstream's envelope in the order its documentation shows in every example
/// (`success`, `data`, then `message`): a `json!` object would sort its keys and put
/// `data` first, which the real upstream never does, and a reader of the flag would
/// then walk the whole payload to find it.
fn envelope(success: bool, data: &Value, message: Option<&Value>) -> Vec<u8> {
    let mut body = Vec::with_capacity(64);
    body.extend_from_slice(if success {
        b"{\"success\":true,\"data\":"
    } else {
        b"{\"success\":false,\"data\":"
    });
    serde_json::to_writer(&mut body, data).expect("generated JSON serialises");
    if let Some(message) = message {
        body.extend_from_slice(b",\"message\":");
        serde_json::to_writer(&mut body, message).expect("a string serialises");
    }
    body.push(b'}');
    body
}

/// Answers one request.
pub(super) async fn handle(shared: &Shared, req: Request<hyper::body::Incoming>) -> Response<Body> {
    let (parts, body) = req.into_parts();
    let req = Request::from_parts(parts, ());
    shared.raw.record(req.uri(), req.headers());
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
    if let Some(early) = undocumented(shared, api_path, req.method(), req.headers(), uri.query()) {
        return early;
    }
    let Some(call) = request::route(api_path, uri.query()) else {
        return cannot();
    };
    let route = &docs::routes()[call.route_id];
    if route.retired {
        return cannot();
    }
    let asked = req.method().as_str();
    let head_for_get = *req.method() == Method::HEAD && route.method == "GET";
    if asked != route.method && !head_for_get {
        if route.method == "GET" {
            let mut r = failure(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed");
            r.headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
            return r;
        }
        return cannot();
    }
    if !authorized(shared, req.headers(), &call.query) {
        return failure(StatusCode::UNAUTHORIZED, "Unauthorized");
    }
    // The documented parameters first, then the answer: a request the upstream
    // refuses is not counted as served.
    if route.check(call.query.pairs()).is_err() || !documented_codes(&call) {
        return failure(StatusCode::BAD_REQUEST, BAD_REQUEST);
    }
    if let Some(early) = throttled(shared) {
        return early;
    }
    let now = shared.clock.now();
    let answer = if route.method == "POST" {
        let body = http_body_util::Limited::new(body, 64 * 1024);
        let json = http_body_util::BodyExt::collect(body)
            .await
            .ok()
            .and_then(|b| serde_json::from_slice::<Value>(&b.to_bytes()).ok());
        api::download_record(json.as_ref(), now)
    } else if call.template == STREAM_PATH {
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

/// A route the docs do not list but the upstream serves (see
/// `SimHandle::serve_undocumented`), answered with the key's check only.
fn undocumented(
    shared: &Shared,
    path: &str,
    method: &Method,
    headers: &HeaderMap,
    query: Option<&str>,
) -> Option<Response<Body>> {
    let listed = shared
        .faults
        .undocumented
        .lock()
        .expect("fault lock is never poisoned")
        .iter()
        .any(|p| p == path);
    if !listed {
        return None;
    }
    let parsed = Query::parse(query);
    if !authorized(shared, headers, &parsed) {
        return Some(failure(StatusCode::UNAUTHORIZED, "Unauthorized"));
    }
    if !matches!(*method, Method::GET | Method::HEAD) {
        return Some(failure(
            StatusCode::METHOD_NOT_ALLOWED,
            "Method Not Allowed",
        ));
    }
    shared.stats.total.fetch_add(1, Ordering::SeqCst);
    let data = json!({ "path": path, "query": query.unwrap_or_default() });
    Some(success(shared, path, data))
}

/// The source's own limit (`SimHandle::set_throttling`): past it, a `429` with
/// `Retry-After`, or a ban answered `200` + `success: false` for a while.
fn throttled(shared: &Shared) -> Option<Response<Body>> {
    let faults = &shared.faults;
    let mut limit = faults
        .throttling
        .lock()
        .expect("fault lock is never poisoned");
    let limit = limit.as_mut()?;
    let now_ms = shared.clock.now().timestamp_millis();
    if now_ms < limit.banned_until_ms {
        faults.throttled.fetch_add(1, Ordering::SeqCst);
        return Some(failure(StatusCode::OK, "socket hang up"));
    }
    let window_ms = i64::try_from(limit.throttling.window.as_millis())
        .unwrap_or(i64::MAX)
        .max(1);
    let window = now_ms.div_euclid(window_ms);
    if window != limit.window {
        limit.window = window;
        limit.count = 0;
    }
    limit.count += 1;
    if limit.count <= limit.throttling.limit {
        return None;
    }
    faults.throttled.fetch_add(1, Ordering::SeqCst);
    match limit.throttling.mode {
        super::state::ThrottleMode::TooManyRequests => {
            let left_ms = (window + 1) * window_ms - now_ms;
            let secs = u64::try_from((left_ms + 999) / 1000).unwrap_or(1).max(1);
            let mut r = failure(
                StatusCode::TOO_MANY_REQUESTS,
                "ThrottlerException: Too Many Requests",
            );
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
            Some(r)
        }
        super::state::ThrottleMode::Ban { lasts } => {
            limit.banned_until_ms =
                now_ms + i64::try_from(lasts.as_millis()).unwrap_or(i64::MAX / 2);
            faults.bans.fetch_add(1, Ordering::SeqCst);
            Some(failure(StatusCode::OK, "socket hang up"))
        }
        super::state::ThrottleMode::WarnThenBan { warnings, lasts } => {
            if limit.count - limit.throttling.limit > warnings {
                limit.banned_until_ms =
                    now_ms + i64::try_from(lasts.as_millis()).unwrap_or(i64::MAX / 2);
                faults.bans.fetch_add(1, Ordering::SeqCst);
            }
            Some(failure(StatusCode::OK, "socket hang up"))
        }
    }
}

/// Whether every code of the request is in a form the docs list: six digits with
/// or without an exchange suffix (`600519`, `600519.SH`); on the K-line also an HK
/// code (five digits, or the secid `116.00700`) or a US secid (`105.AAPL`). The
/// prefix forms people type (`SH600519`, `sh.600519`) and A-share secids are not
/// documented.
fn documented_codes(call: &Call) -> bool {
    let kline = call.template == "/stock/kline";
    let one = |code: &str| {
        let code = code.trim();
        if code.is_empty() {
            return true;
        }
        let six = |d: &str| d.len() == 6 && d.bytes().all(|b| b.is_ascii_digit());
        match code.split_once('.') {
            None => {
                six(code) || (kline && code.len() == 5 && code.bytes().all(|b| b.is_ascii_digit()))
            }
            Some((digits, suffix)) if six(digits) => ["SH", "SZ", "BJ"]
                .iter()
                .any(|s| s.eq_ignore_ascii_case(suffix)),
            Some(("116", digits)) => {
                kline && digits.len() == 5 && digits.bytes().all(|b| b.is_ascii_digit())
            }
            Some((market, ticker)) => {
                kline
                    && matches!(market, "105" | "106" | "107")
                    && !ticker.is_empty()
                    && ticker
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'_')
            }
        }
    };
    let path_code = call.template.contains("{code}").then(|| call.id());
    // The shareholder list's `code` is a holder's, not a security's.
    let holder = call.template == "/stock/shareholder/list";
    let query_codes = ["code", "codes"]
        .into_iter()
        .filter(|_| !holder)
        .filter_map(|name| call.query.get(name));
    path_code
        .into_iter()
        .chain(query_codes)
        .all(|value| value.split(',').all(one))
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
        .any(|key| key == shared.token)
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
    let mut by_target = stats
        .by_target
        .lock()
        .expect("stats lock is never poisoned");
    if let Some(n) = by_target.get_mut(&target) {
        *n += 1;
    } else if by_target.len() < MAX_TARGETS {
        by_target.insert(target, 1);
    }
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
    let body = envelope(true, &data, None);
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
    let names = docs::routes().iter().map(|r| r.template);
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
        let clean = envelope(true, &data, None);
        let dirty = raw_controls(&clean);
        assert!(serde_json::from_slice::<Value>(&dirty).is_err());
        assert!(dirty.contains(&b'\n') && dirty.contains(&1u8));
        let text = String::from_utf8(dirty).unwrap();
        assert!(text.contains("\"name\":\"沪深30\n\u{1}0ETF\""), "{text}");
    }

    /// The flag first, as the upstream's documented examples all have it.
    #[test]
    fn the_envelope_is_written_in_the_upstreams_order() {
        let ok = envelope(true, &json!({ "b": 1, "a": [2] }), None);
        assert_eq!(ok, br#"{"success":true,"data":{"a":[2],"b":1}}"#);
        let failed = envelope(false, &Value::Null, Some(&json!("busy")));
        assert_eq!(failed, br#"{"success":false,"data":null,"message":"busy"}"#);
        let parsed: Value = serde_json::from_slice(&failed).unwrap();
        assert_eq!(
            parsed,
            json!({ "success": false, "data": null, "message": "busy" })
        );
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
