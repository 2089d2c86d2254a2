//! The OpenAPI 3.1 document of what mdproxy serves, generated from the catalogue and
//! the error enum alone; serving it (`GET /api/v1/openapi.json`, `mdproxy openapi`)
//! is the edge's and the command line's business.
//!
//! Path keys are the catalogue's templates, relative to the one server `/api/v1`
//! (`/stock/kline`, not `/api/v1/stock/kline`): a client given the base URL
//! `http://host:port/api/v1` reaches every operation.
//!
//! A success's `data` has the schema its documented example shows (`api::shapes`),
//! one named schema per operation (`StockDetailByCodeData`), so that generated
//! clients are typed; an endpoint whose docs show no success is left open.
//!
//! The stream's `text/event-stream` schema describes one event (`event`, `id`,
//! `data`, `retry`), as OpenAPI 3.2's `itemSchema` does. 3.1 leaves open whether it
//! describes the whole stream or each event; schemathesis reads it per event, and a
//! string schema would fail every event it reads.

use http::StatusCode;
use serde_json::{Map, Value, json};

use crate::CacheStatus;
use crate::catalog::{Endpoint, KeyRole, MAX_CODES, Param, ParamKind, REFUSED, catalog};
use crate::error::Error;
use crate::router::API_PREFIX;
use crate::shapes;

/// Where the proxy serves the document, relative to [`API_PREFIX`]. Not an endpoint
/// of the API: it is public and never reaches the upstream.
pub const DOCUMENT_PATH: &str = "/openapi.json";

/// What `str::trim` removes around each code of a list: Unicode `White_Space`.
/// Spelled out because `\s` means other sets in ECMA-262 and in Python.
const TRIMMED: &str =
    r"[\t\n\x0b\x0c\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]*";
/// A date as `api::value` takes it, the days a month lacks aside: 1900 to 2099.
const DATE: &str = "(19|20)[0-9]{2}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])";
/// Free text: no Unicode control character (`char::is_control`, category Cc).
const NO_CONTROL: &str = r"^[^\x00-\x1f\x7f-\x9f]*$";

/// The whole document.
pub fn document() -> Value {
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "mdproxy",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "A caching read-through proxy for a Chinese market-data API: \
                the upstream's paths, parameters and JSON bodies, answered from a cache. \
                Every operation also answers HEAD (same headers, no body). The browser \
                cache-buster `_` is accepted on every operation and ignored. Errors made \
                by mdproxy carry an `error` object with a stable `code`; answers the \
                upstream gave (a 404 for an unknown code, a body with `success: false`) \
                are relayed as they came.",
        },
        "servers": [{ "url": API_PREFIX, "description": "this proxy" }],
        "tags": tags(),
        "security": [{ "bearer": [] }, { "apiKeyHeader": [] }, { "apiKeyQuery": [] }],
        "paths": paths(),
        "components": components(),
    })
}

/// One tag per group, in catalogue order.
fn tags() -> Value {
    let mut names: Vec<&str> = Vec::new();
    for endpoint in catalog().endpoints() {
        let name = endpoint.group.as_str();
        if !names.contains(&name) {
            names.push(name);
        }
    }
    names
        .into_iter()
        .map(|name| json!({ "name": name }))
        .collect()
}

fn paths() -> Value {
    let mut paths: Map<String, Value> = catalog()
        .endpoints()
        .iter()
        .map(|e| (e.path.clone(), json!({ "get": operation(e) })))
        .collect();
    for (path, reason) in REFUSED {
        paths.insert((*path).to_owned(), json!({ "post": refused(path, reason) }));
    }
    paths.into()
}

/// A documented operation mdproxy refuses (a side effect upstream, not a query): its
/// only answer is `501 not_implemented` with the reason.
fn refused(path: &str, reason: &str) -> Value {
    json!({
        "operationId": operation_id(path),
        "summary": "Refused by mdproxy: the upstream's side effect, never forwarded",
        "description": reason,
        "tags": [path.split('/').nth(1).unwrap_or_default()],
        "requestBody": {
            "content": { "application/json": { "schema": { "type": "object" } } },
        },
        "responses": {
            "401": reference("responses", "Error401"),
            "429": reference("responses", "Error429"),
            "501": reference("responses", "Error501"),
        },
    })
}

fn operation(endpoint: &Endpoint) -> Value {
    let path = endpoint.path_params.iter().map(|p| parameter(p, "path"));
    let query = endpoint.query.iter().map(|p| parameter(p, "query"));
    json!({
        "operationId": operation_id(&endpoint.path),
        "summary": endpoint.summary,
        "tags": [endpoint.group.as_str()],
        "parameters": path.chain(query).collect::<Vec<_>>(),
        "responses": responses(endpoint),
    })
}

/// `/stock/detail/{code}` → `stockDetailByCode`: unique because templates are.
fn operation_id(path: &str) -> String {
    let mut id = String::with_capacity(path.len());
    for segment in path.split('/').filter(|s| !s.is_empty()) {
        let words = match crate::catalog::param_name(segment) {
            Some(name) => format!("by-{name}"),
            None => segment.to_owned(),
        };
        for word in words.split(['-', '_']) {
            let mut chars = word.chars();
            if let Some(first) = chars.next() {
                if id.is_empty() {
                    id.push(first);
                } else {
                    id.extend(first.to_uppercase());
                }
                id.push_str(chars.as_str());
            }
        }
    }
    id
}

fn parameter(param: &Param, location: &str) -> Value {
    let mut out = json!({
        "name": param.name,
        "in": location,
        "required": param.required || location == "path",
        "schema": schema(param),
        "example": typed(param.kind, param.example()),
    });
    let mut notes = Vec::new();
    if param.empty_is_absent {
        notes.push("An empty value counts as absent.");
    }
    if param.role == KeyRole::Dropped {
        notes.push("Validated, then left out of the cache key and not sent upstream.");
    }
    if !notes.is_empty() {
        out["description"] = notes.join(" ").into();
    }
    out
}

/// The JSON schema of a parameter: its kind's, with the catalogue's default (and, for
/// a required one, at least one character: empty counts as missing).
pub(crate) fn schema(param: &Param) -> Value {
    let mut schema = kind_schema(param.kind);
    if param.required && schema["type"] == "string" && schema.get("enum").is_none() {
        schema["minLength"] = 1.into();
    }
    // An optional date or period given empty is absent: the empty string is valid.
    if !param.required
        && param.empty_is_absent
        && matches!(param.kind, ParamKind::Date | ParamKind::Period)
        && let Some(map) = schema.as_object_mut()
    {
        let pattern = map["pattern"].as_str().unwrap_or_default().to_owned();
        map.insert("pattern".into(), format!("^$|{pattern}").into());
        map.remove("format");
    }
    if let Some(default) = param.default {
        schema["default"] = typed(param.kind, default);
    }
    schema
}

/// A catalogue value (a default, an example) as the JSON type its schema has.
fn typed(kind: ParamKind, value: &str) -> Value {
    match kind {
        ParamKind::Int { .. } => value
            .parse::<i64>()
            .expect("the catalogue's integer values are integers")
            .into(),
        _ => value.into(),
    }
}

/// What `params::canonical` accepts for each kind, as JSON schema.
fn kind_schema(kind: ParamKind) -> Value {
    let pattern = |p: String| json!({ "type": "string", "pattern": p });
    match kind {
        ParamKind::Code(rule) => {
            let mut schema = pattern(format!("^{}$", rule.pattern()));
            schema["description"] = format!("A code: {}.", rule.forms()).into();
            schema
        }
        ParamKind::Codes(rule) => {
            let code = format!("{TRIMMED}{}{TRIMMED}", rule.pattern());
            let more = MAX_CODES - 1;
            let mut schema = pattern(format!("^{code}(,{code}){{0,{more}}}$"));
            schema["description"] = format!(
                "Comma-separated codes, at most {MAX_CODES}, each {}.",
                rule.forms()
            )
            .into();
            schema
        }
        ParamKind::Period => pattern(format!("^([0-9]{{4}}(0[1-9]|1[0-2])|{DATE})$")),
        // 1 to 64 of these characters, but not "." or "..": written without a
        // lookahead, which not every schema tool reads.
        ParamKind::Ident => pattern(
            "^([0-9A-Za-z_-][0-9A-Za-z._-]{0,63}|\\.[0-9A-Za-z_-][0-9A-Za-z._-]{0,62}|\\.\\.[0-9A-Za-z._-]{1,62})$"
                .into(),
        ),
        ParamKind::Choice(values) => json!({ "type": "string", "enum": values }),
        ParamKind::Int { min, max } => json!({ "type": "integer", "minimum": min, "maximum": max }),
        ParamKind::Date => json!({
            "type": "string",
            "format": "date",
            "pattern": format!("^{DATE}$"),
        }),
        ParamKind::Text { max_chars } => json!({
            "type": "string",
            "maxLength": max_chars,
            "pattern": NO_CONTROL,
        }),
    }
}

/// An operation's answers: its success, 304, and every error status.
fn responses(endpoint: &Endpoint) -> Value {
    let mut out = Map::new();
    let success = if endpoint.streaming {
        reference("responses", "Stream")
    } else {
        answer_response(endpoint)
    };
    out.insert("200".into(), success);
    for status in error_statuses() {
        let status = status.as_u16().to_string();
        out.insert(
            status.clone(),
            reference("responses", &format!("Error{status}")),
        );
    }
    // The stream is the hub's: never revalidated, never an upstream answer relayed.
    if !endpoint.streaming {
        out.insert("304".into(), reference("responses", "NotModified"));
        out.insert("4XX".into(), reference("responses", "Relayed"));
    }
    out.into()
}

/// `stockDetailByCode` → `StockDetailByCodeData`: the name of the schema of an
/// endpoint's `data`.
fn data_schema_name(endpoint: &Endpoint) -> String {
    let id = operation_id(&endpoint.path);
    let mut chars = id.chars();
    let first = chars.next().map(|c| c.to_ascii_uppercase());
    format!(
        "{}{}Data",
        first.into_iter().collect::<String>(),
        chars.as_str()
    )
}

/// The schema of each endpoint's `data` (not the stream's), by name.
fn data_schemas() -> impl Iterator<Item = (String, Value)> {
    catalog()
        .endpoints()
        .iter()
        .filter(|e| !e.streaming)
        .map(|e| {
            let schema = shapes::data_schema(&e.path).unwrap_or_else(|| {
                json!({ "description": "Undocumented: the upstream's docs show no successful answer of this endpoint." })
            });
            (data_schema_name(e), schema)
        })
}

fn reference(kind: &str, name: &str) -> Value {
    json!({ "$ref": format!("#/components/{kind}/{name}") })
}

/// Every status mdproxy answers an error with, ascending.
fn error_statuses() -> Vec<StatusCode> {
    let mut statuses: Vec<StatusCode> = Error::one_of_each().iter().map(Error::status).collect();
    statuses.sort_unstable();
    statuses.dedup();
    statuses
}

/// Whether an upstream answer with this status can reach the client as it came:
/// `upstream::client` relays a 4xx unless it is about the proxy's own credentials or
/// rate (401, 403, 429), which become `upstream_error`.
fn may_be_relayed(status: StatusCode) -> bool {
    status.is_client_error()
        && !matches!(
            status,
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN | StatusCode::TOO_MANY_REQUESTS
        )
}

fn components() -> Value {
    let mut responses = Map::new();
    responses.insert("Stream".into(), stream_response());
    responses.insert(
        "NotModified".into(),
        json!({
            "description": "The representation named by `If-None-Match` is current.",
            "headers": cache_header_references(),
        }),
    );
    responses.insert(
        "Relayed".into(),
        json!({
            "description": "Another client error of the upstream, relayed as it came.",
            "content": { "application/json": { "schema": reference("schemas", "Envelope") } },
        }),
    );
    for status in error_statuses() {
        responses.insert(format!("Error{}", status.as_u16()), error_response(status));
    }
    let mut schemas = Map::new();
    schemas.insert("Envelope".into(), envelope_schema());
    schemas.insert("UpstreamFailure".into(), upstream_failure_schema());
    schemas.insert("Error".into(), error_schema());
    schemas.insert("StreamEvent".into(), stream_event_schema());
    schemas.extend(data_schemas());
    json!({
        "securitySchemes": {
            "bearer": {
                "type": "http",
                "scheme": "bearer",
                "description": "`Authorization: Bearer <token>`: a client token of `auth.tokens`.",
            },
            "apiKeyHeader": { "type": "apiKey", "in": "header", "name": "x-api-key" },
            "apiKeyQuery": { "type": "apiKey", "in": "query", "name": "x-api-key" },
        },
        "schemas": schemas,
        "responses": responses,
        "headers": cache_headers(),
    })
}

/// An endpoint's success: its `data` typed, or the upstream's own failure relayed.
fn answer_response(endpoint: &Endpoint) -> Value {
    let success = json!({
        "type": "object",
        "required": ["success", "data"],
        "properties": {
            "success": { "const": true },
            "data": reference("schemas", &data_schema_name(endpoint)),
            "message": { "type": "string" },
        },
    });
    json!({
        "description": "The upstream's body, byte for byte (from the cache or fetched). \
            A body with `success: false` is the upstream's own failure, relayed.",
        "headers": cache_header_references(),
        "content": { "application/json": { "schema": {
            "oneOf": [success, reference("schemas", "UpstreamFailure")],
        } } },
    })
}

fn stream_response() -> Value {
    json!({
        "description": "Server-sent events: `retry:` once, then `quote` events (a \
            snapshot of the codes, then the quotes that changed, at most `pz` a \
            event) and a keepalive comment every 15 s.",
        "headers": { "Cache-Control": header_schema(json!({ "type": "string" }), "`no-cache`") },
        "content": { "text/event-stream": { "schema": reference("schemas", "StreamEvent") } },
    })
}

/// The headers of a cached answer (absent on a relayed one).
fn cache_headers() -> Value {
    let labels: Vec<&str> = CacheStatus::ALL.iter().map(|s| s.as_str()).collect();
    let string = json!({ "type": "string" });
    json!({
        "X-Cache": header_schema(json!({ "type": "string", "enum": labels }), "How the cache answered."),
        "Cache-Status": header_schema(string.clone(), "RFC 9211, e.g. `mdproxy; hit; ttl=12`."),
        "ETag": header_schema(string.clone(), "Strong validator; send it back in `If-None-Match`."),
        "Cache-Control": header_schema(string, "`max-age=<seconds still fresh>`; `no-store` on a relayed answer."),
        "Age": header_schema(json!({ "type": "integer", "minimum": 0 }), "Seconds since the upstream produced the answer."),
    })
}

/// References to [`cache_headers`] in the components.
fn cache_header_references() -> Value {
    cache_headers()
        .as_object()
        .expect("the cache headers are an object")
        .keys()
        .map(|name| (name.clone(), reference("headers", name)))
        .collect::<Map<String, Value>>()
        .into()
}

fn header_schema(schema: Value, description: &str) -> Value {
    json!({ "description": description, "schema": schema })
}

fn error_response(status: StatusCode) -> Value {
    let codes: Vec<&str> = Error::one_of_each()
        .iter()
        .filter(|e| e.status() == status)
        .map(Error::code)
        .collect();
    let ours = json!({
        "allOf": [
            reference("schemas", "Error"),
            { "properties": { "error": { "properties": { "code": { "enum": codes } } } } },
        ],
    });
    let (schema, relayed) = if may_be_relayed(status) {
        let either = json!({ "anyOf": [ours, reference("schemas", "Envelope")] });
        (either, "; or the upstream's own answer, relayed as it came")
    } else {
        (ours, "")
    };
    let mut response = json!({
        "description": format!("`{}`{relayed}.", codes.join("`, `")),
        "content": { "application/json": { "schema": schema } },
    });
    let header = match status {
        StatusCode::UNAUTHORIZED => Some(("WWW-Authenticate", "`Bearer realm=\"mdproxy\"`.")),
        StatusCode::METHOD_NOT_ALLOWED => Some(("Allow", "`GET, HEAD`.")),
        _ => None,
    };
    if let Some((name, description)) = header {
        response["headers"] =
            json!({ name: header_schema(json!({ "type": "string" }), description) });
    }
    if status == StatusCode::TOO_MANY_REQUESTS {
        response["headers"] = json!({
            "Retry-After": header_schema(json!({ "type": "integer", "minimum": 0 }), "Seconds until the token may call again."),
        });
    }
    response
}

/// The upstream's envelope, which every JSON answer of the API is in.
fn envelope_schema() -> Value {
    json!({
        "type": "object",
        "required": ["success"],
        "properties": {
            "success": { "type": "boolean" },
            "data": { "description": "The answer: an object, an array, a string or null." },
            "message": { "type": "string" },
        },
    })
}

/// The upstream's own failure, answered with 200 (`socket hang up`, `Failed to
/// fetch kline`) and relayed as it came.
fn upstream_failure_schema() -> Value {
    json!({
        "type": "object",
        "required": ["success"],
        "properties": {
            "success": { "const": false },
            "data": { "description": "`null` in every documented failure." },
            "message": { "type": "string" },
        },
    })
}

/// The envelope of mdproxy's own errors. The properties are the contract's; which
/// of them are required is read off what `Error::envelope` writes, so the schema
/// follows the code rather than a copy of it.
fn error_schema() -> Value {
    let codes: Vec<&str> = Error::one_of_each().iter().map(Error::code).collect();
    let sample = |e: &Error| -> Value {
        serde_json::from_slice(&e.envelope()).expect("an error envelope is JSON")
    };
    let keys = |v: &Value| -> Vec<String> {
        v.as_object()
            .map(|o| o.keys().cloned().collect())
            .unwrap_or_default()
    };
    let envelope = sample(&Error::NOT_FOUND);
    json!({
        "type": "object",
        "required": keys(&envelope),
        "properties": {
            "success": { "const": false },
            "data": { "type": "null" },
            "message": { "type": "string" },
            "error": {
                "type": "object",
                "required": keys(&envelope["error"]),
                "properties": {
                    "code": { "type": "string", "enum": codes },
                    "message": { "type": "string" },
                    "param": { "type": "string", "description": "The parameter the error is about." },
                },
            },
        },
    })
}

/// One event of the quote stream, as an SSE parser hands it over.
fn stream_event_schema() -> Value {
    json!({
        "type": "object",
        "required": ["event", "data"],
        "properties": {
            "event": { "const": "quote" },
            "id": { "type": "string", "description": "The hub's tick." },
            "retry": { "type": "integer", "minimum": 0 },
            "data": {
                "type": "string",
                "contentMediaType": "application/json",
                "contentSchema": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["code"],
                        "properties": { "code": { "type": "string" } },
                    },
                },
            },
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operation_ids_are_camel_case_and_unique() {
        assert_eq!(operation_id("/stock/detail/{code}"), "stockDetailByCode");
        assert_eq!(
            operation_id("/stock/earnings-forecast"),
            "stockEarningsForecast"
        );
        let mut ids: Vec<String> = catalog()
            .endpoints()
            .iter()
            .map(|e| operation_id(&e.path))
            .collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), catalog().len());
    }

    #[test]
    fn error_statuses_come_from_the_error_enum() {
        let statuses: Vec<u16> = error_statuses().iter().map(StatusCode::as_u16).collect();
        for status in [400, 401, 404, 405, 429, 502, 503, 504] {
            assert!(statuses.contains(&status), "{status} in {statuses:?}");
        }
    }

    #[test]
    fn integer_defaults_are_integers() {
        let doc = document();
        let pz = doc["paths"]["/stock/indicator/realtime/sse"]["get"]["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == "pz")
            .unwrap()
            .clone();
        assert_eq!(pz["schema"]["default"], 20);
        assert_eq!(pz["schema"]["type"], "integer");
    }
}
