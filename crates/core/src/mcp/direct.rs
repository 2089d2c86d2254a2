//! A stateless `tools/call` (the 2026-07-28 revision) answered without rmcp's
//! service in the way: rmcp's task per request, its channels and its several
//! parses of the message are most of what a cached call costs
//! (docs/BENCHMARKS.md). Only a request whose every part this recognises is
//! answered here (the headers, then the body read into rmcp's own types, no
//! field more); the call is the one the service makes ([`Server::call`]) and the
//! answer is written as rmcp writes it. Anything else goes to rmcp whole.

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, Response, StatusCode, header};
use rmcp::model::{ClientCapabilities, Implementation, JsonObject, JsonRpcVersion2_0, RequestId};
use serde::Deserialize;

use super::server::Server;

/// The revision answered here.
const REVISION: &str = "2026-07-28";
/// The one method answered here.
const METHOD: &str = "tools/call";
/// The largest body read here (a call's arguments are a few hundred bytes); a
/// larger one goes to rmcp unread.
pub const MAX_BODY: u64 = 64 * 1024;

/// Whether a request with `method` and `headers` may be a stateless tool call
/// this answers: exactly one of each header the revision asks for, with the
/// values it must have, and nothing that asks more of the transport (a session,
/// an origin to check, a resumed stream, parameters in headers, weighted media
/// types). Its body must still be read ([`parse`]).
pub fn eligible(method: &Method, headers: &HeaderMap) -> bool {
    let one = |name: &str| {
        let mut values = headers.get_all(name).iter();
        match (values.next(), values.next()) {
            (Some(v), None) => v.to_str().ok(),
            _ => None,
        }
    };
    let absent = ["mcp-session-id", "origin", "last-event-id"];
    let small = one("content-length")
        .and_then(|n| n.parse::<u64>().ok())
        .is_some_and(|n| n <= MAX_BODY);
    *method == Method::POST
        && small
        && one("mcp-protocol-version") == Some(REVISION)
        && one("mcp-method") == Some(METHOD)
        && one("mcp-name").is_some()
        && absent.iter().all(|h| !headers.contains_key(*h))
        && !headers.keys().any(|k| k.as_str().starts_with("mcp-param-"))
        && one("content-type").is_some_and(is_json)
        && one("accept").is_some_and(accepts_both)
}

/// `application/json`, with parameters or not.
fn is_json(value: &str) -> bool {
    let essence = value.split(';').next().unwrap_or_default().trim();
    essence.eq_ignore_ascii_case("application/json")
}

/// An `Accept` that names JSON and event streams, without weights (a `q=` sends
/// the request to rmcp, which reads them).
fn accepts_both(value: &str) -> bool {
    if value.contains("q=") || value.contains('"') {
        return false;
    }
    let types: Vec<&str> = value
        .split(',')
        .map(|t| t.split(';').next().unwrap_or_default().trim())
        .collect();
    let has = |want: &str| types.iter().any(|t| t.eq_ignore_ascii_case(want));
    has("application/json") && has("text/event-stream")
}

/// A `tools/call` message with nothing but what the revision defines.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Message {
    #[serde(rename = "jsonrpc")]
    _jsonrpc: JsonRpcVersion2_0,
    id: RequestId,
    method: String,
    params: Params,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Params {
    name: String,
    #[serde(default)]
    arguments: Option<JsonObject>,
    #[serde(rename = "_meta")]
    meta: Meta,
}

/// The request metadata the revision requires, and no other.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Meta {
    #[serde(rename = "io.modelcontextprotocol/protocolVersion")]
    protocol_version: String,
    #[serde(rename = "io.modelcontextprotocol/clientInfo")]
    _client_info: Implementation,
    #[serde(rename = "io.modelcontextprotocol/clientCapabilities")]
    capabilities: ClientCapabilities,
}

/// A call read from a body this answers.
pub struct Call {
    id: RequestId,
    name: String,
    arguments: JsonObject,
}

/// The call `body` holds, when it is one this answers: the revision's message
/// whose tool is the one `headers` name, from a client that asks for no
/// extension of the call (tasks).
pub fn parse(headers: &HeaderMap, body: &[u8]) -> Option<Call> {
    let message: Message = serde_json::from_slice(body).ok()?;
    let named = headers.get("mcp-name").map(HeaderValue::as_bytes);
    let plain = message.params.meta.capabilities == ClientCapabilities::default();
    (message.method == METHOD
        && message.params.meta.protocol_version == REVISION
        && named == Some(message.params.name.as_bytes())
        && plain)
        .then(|| Call {
            id: message.id,
            name: message.params.name,
            arguments: message.params.arguments.unwrap_or_default(),
        })
}

/// Answers `call` as rmcp's service would: the tool's result (or `None` for a
/// tool this profile does not offer: rmcp says so), as a JSON-RPC response. A
/// result is written once per cache entry ([`super::memo`]); only the id is
/// this request's.
pub async fn answer(
    server: &Server,
    call: Call,
    request: Option<&tracing::Span>,
) -> Option<Response<Bytes>> {
    let read = server
        .read_call(&call.name, &call.arguments, request)
        .await
        .ok()?;
    let result = read.rendered.result_json();
    let id = serde_json::to_vec(&call.id).ok()?;
    // As rmcp writes a `JsonRpcResponse`: its fields in this order.
    let mut body = Vec::with_capacity(result.len() + id.len() + 40);
    body.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
    body.extend_from_slice(&id);
    body.extend_from_slice(br#","result":"#);
    body.extend_from_slice(&result);
    body.push(b'}');
    let mut response = Response::new(Bytes::from(body));
    *response.status_mut() = StatusCode::OK;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Some(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.append(*k, HeaderValue::from_static(v));
        }
        map
    }

    const GOOD: [(&str, &str); 6] = [
        ("content-length", "300"),
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tools/call"),
        ("mcp-name", "get_market_indices"),
        ("content-type", "application/json"),
        ("accept", "application/json, text/event-stream"),
    ];

    /// Only a request with the revision's headers and nothing more is read here.
    #[test]
    fn only_the_plain_stateless_call_is_eligible() {
        assert!(eligible(&Method::POST, &headers(&GOOD)));
        assert!(!eligible(&Method::GET, &headers(&GOOD)));
        for drop in 0..GOOD.len() {
            let fewer: Vec<_> = GOOD
                .iter()
                .enumerate()
                .filter(|(i, _)| *i != drop)
                .map(|(_, p)| *p)
                .collect();
            assert!(!eligible(&Method::POST, &headers(&fewer)), "{drop}");
        }
        for extra in [
            ("mcp-session-id", "s"),
            ("origin", "http://a"),
            ("last-event-id", "1"),
            ("mcp-param-code", "600519"),
            ("mcp-method", "tools/call"),
        ] {
            let mut more = GOOD.to_vec();
            more.push(extra);
            assert!(!eligible(&Method::POST, &headers(&more)), "{extra:?}");
        }
        let mut weighted = headers(&GOOD);
        weighted.insert(
            "accept",
            HeaderValue::from_static("application/json;q=0, text/event-stream"),
        );
        assert!(!eligible(&Method::POST, &weighted));
        let mut large = headers(&GOOD);
        large.insert("content-length", HeaderValue::from_static("70000"));
        assert!(!eligible(&Method::POST, &large));
    }

    /// The body is the revision's message for the tool the headers name, with
    /// no field more.
    #[test]
    fn only_the_revisions_message_is_read() {
        let meta = r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"a","version":"1"},"io.modelcontextprotocol/clientCapabilities":{}}"#;
        let body = |params: &str| {
            format!(
                r#"{{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{{{params},{meta}}}}}"#
            )
        };
        let h = headers(&GOOD);
        let call = parse(
            &h,
            body(r#""name":"get_market_indices","arguments":{}"#).as_bytes(),
        );
        assert!(
            call.is_some_and(|c| c.name == "get_market_indices" && c.id == RequestId::Number(7))
        );
        assert!(parse(&h, body(r#""name":"get_market_indices""#).as_bytes()).is_some());
        for other in [
            r#""name":"search_stocks","arguments":{}"#,
            r#""name":"get_market_indices","arguments":{},"task":{}"#,
            r#""name":"get_market_indices","arguments":[]"#,
        ] {
            assert!(parse(&h, body(other).as_bytes()).is_none(), "{other}");
        }
        let older = body(r#""name":"get_market_indices""#).replace("2026-07-28", "2025-11-25");
        assert!(parse(&h, older.as_bytes()).is_none());
        let progress = body(r#""name":"get_market_indices""#)
            .replace(r#""_meta":{"#, r#""_meta":{"progressToken":1,"#);
        assert!(parse(&h, progress.as_bytes()).is_none());
        assert!(parse(&h, b"{").is_none());
    }
}
