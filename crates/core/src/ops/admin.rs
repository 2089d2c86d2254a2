//! The admin listener (a separate address, for operators and scrapers): `/metrics`
//! (OpenMetrics text), `/healthz`, `/readyz` (503 until the upstream answered or the
//! cache is warm), `/status` and `/status.json` (hit ratio per endpoint, upstream
//! health, market, streams, reloads) and `POST /purge` (by key, endpoint or prefix)
//! behind the admin token. Nothing here is reachable from the client listener.

use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use serde_json::json;

use crate::cache::purge::Purge;
use crate::edge::body::{self, Body};
use crate::edge::response::IntoResponse;
use crate::ops::metrics::Metrics;
use crate::ops::overview::Overview;
use crate::state::AppState;
use mdproxy_api::catalog::catalog;
use mdproxy_api::error::Error;
use mdproxy_config::PassthroughConfig;

/// What the admin listener reads: the shared state, the metrics registry (built
/// once) and what `/status` shows.
pub struct Admin {
    state: AppState,
    metrics: Metrics,
    overview: Overview,
}

fn json_response(status: StatusCode, value: &serde_json::Value) -> Response<Body> {
    let mut r = Response::new(body::full(
        serde_json::to_vec(value).expect("a JSON value always serialises"),
    ));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

impl Admin {
    /// The admin service over `state`, serving `metrics` and `overview`.
    pub fn new(state: AppState, metrics: Metrics, overview: Overview) -> Admin {
        Admin {
            state,
            metrics,
            overview,
        }
    }

    /// Serves one admin request.
    pub async fn handle<B>(
        &self,
        request: Request<B>,
    ) -> Result<Response<Body>, std::convert::Infallible> {
        let state = &self.state;
        let response = match (request.method(), request.uri().path()) {
            (&Method::GET, "/metrics") => {
                let mut r = Response::new(body::full(self.metrics.render()));
                r.headers_mut().insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static(crate::ops::metrics::CONTENT_TYPE),
                );
                r
            }
            (&Method::GET, "/healthz") => json_response(StatusCode::OK, &json!({ "status": "ok" })),
            (&Method::GET, "/readyz") => {
                let entries = state.cache().store().entry_count();
                match state.upstream().health().readiness(entries) {
                    Ok(why) => json_response(
                        StatusCode::OK,
                        &json!({ "ready": true, "reason": why.to_string() }),
                    ),
                    Err(why) => json_response(
                        StatusCode::SERVICE_UNAVAILABLE,
                        &json!({ "ready": false, "reason": why.to_string() }),
                    ),
                }
            }
            (&Method::GET, "/status.json") => json_response(StatusCode::OK, &self.overview.json()),
            (&Method::POST, "/purge") => match purge(state, &request).await {
                Ok(report) => json_response(StatusCode::OK, &report),
                Err(e) => e.to_response(),
            },
            (&Method::GET, "/status") => crate::ops::status::page(&self.overview.json()),
            (_, "/purge") => Error::MethodNotAllowed { allow: "POST" }.to_response(),
            (_, "/metrics" | "/healthz" | "/readyz" | "/status" | "/status.json") => {
                Error::MethodNotAllowed { allow: "GET" }.to_response()
            }
            _ => Error::NOT_FOUND.to_response(),
        };
        Ok(response)
    }
}

/// Drops cached answers: `POST /purge` with `Authorization: Bearer <admin.token>`
/// and one of
/// - `target=/stock/detail/600519`: that one answer (canonicalised like a request,
///   so parameter order and defaults do not matter; its own query percent-encoded,
///   `target=%2Fstock%2Fkline%3Fcode%3D600519%26period%3Dweek`);
/// - `endpoint=/stock/detail/{code}`: every answer of that endpoint (the template as
///   in the catalogue);
/// - `prefix=/stock/`: every key starting so (like a Varnish ban on the URL),
///   pass-through answers under it included (`prefix=/` drops everything);
/// - `endpoint=passthrough`: every pass-through answer.
///
/// Any other parameter is refused by name; one beside a `target` is the target's own
/// query sent unencoded (see [`unencoded_target`]).
///
/// Reports how many entries this node held and dropped (in a cluster the same keys
/// are dropped from the shared store and from every other node, whether this node
/// held them or not).
async fn purge<B>(state: &AppState, request: &Request<B>) -> Result<serde_json::Value, Error> {
    let snap = state.snapshot();
    let presented = crate::edge::auth::bearer(request.headers()).unwrap_or_default();
    if snap.config.admin.token.is_empty() || !snap.config.admin.token.matches(presented) {
        return Err(Error::ADMIN_UNAUTHORIZED);
    }
    let query = request.uri().query().unwrap_or_default();
    type Pairs = Vec<(String, String)>;
    let (given, others): (Pairs, Pairs) = form_urlencoded::parse(query.as_bytes())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .partition(|(k, _)| matches!(k.as_str(), "target" | "endpoint" | "prefix"));
    if let Some((name, _)) = others.first() {
        return Err(match given.as_slice() {
            [(mode, target)] if mode == "target" => unencoded_target(target, &others),
            _ => Error::UnknownParameter {
                suggestion: None,
                param: name.clone(),
            },
        });
    }
    let [(mode, raw)] = given.as_slice() else {
        return Err(Error::BadRequest {
            reason: "give exactly one of target (a request path and query), endpoint (a path template such as /stock/detail/{code}) or prefix (a key prefix such as /stock/)".into(),
        });
    };
    let cache = state.cache();
    let (what, purged) = match mode.as_str() {
        "target" => {
            let key = target_key(raw, &snap.config.passthrough)?;
            let held = cache.purge(&Purge::Key(key.clone())).await;
            (key, held)
        }
        "endpoint" if raw == "passthrough" => {
            let n = cache.purge(&Purge::passthrough()).await;
            (raw.clone(), n)
        }
        "endpoint" => {
            let template = raw
                .strip_prefix(mdproxy_api::router::API_PREFIX)
                .unwrap_or(raw);
            let endpoint = catalog()
                .endpoints()
                .iter()
                .find(|e| e.path == template)
                .ok_or_else(|| {
                    Error::invalid(
                        "endpoint",
                        format!(
                            "no endpoint template {template}; see /api/v1/openapi.json for the list, or endpoint=passthrough for every pass-through answer"
                        ),
                    )
                })?;
            let n = cache.purge(&Purge::Endpoint(endpoint)).await;
            (endpoint.path.clone(), n)
        }
        _ => {
            let prefix = raw
                .strip_prefix(mdproxy_api::router::API_PREFIX)
                .unwrap_or(raw);
            if !prefix.starts_with('/') {
                return Err(Error::invalid(
                    "prefix",
                    "a key prefix starts with /, such as /stock/",
                ));
            }
            let n = cache.purge(&Purge::Prefix(prefix.to_owned())).await;
            (prefix.to_owned(), n)
        }
    };
    tracing::info!(mode = %mode, what = %what, purged, "purged");
    Ok(json!({ "mode": mode, "purged": purged, mode.as_str(): what }))
}

/// The cache key `target=` names: a catalogue request canonicalised as a request
/// is (`/api/v1` in front or not), else, with pass-through on, the pass-through key
/// of that path and query.
///
/// # Errors
/// The parameter's own error (naming `period`, `code`...), or `target` naming no
/// endpoint.
fn target_key(raw: &str, passthrough: &PassthroughConfig) -> Result<String, Error> {
    let target = raw
        .strip_prefix(mdproxy_api::router::API_PREFIX)
        .unwrap_or(raw);
    let (path, query) = match target.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (target, None),
    };
    if passthrough.enabled && mdproxy_api::router().route(path).is_none() {
        return mdproxy_api::passthrough::target(
            path,
            query,
            passthrough.class,
            passthrough.max_target_bytes,
        )
        .map(|valid| valid.target)
        .map_err(|_| Error::invalid("target", "not a path a pass-through request can have"));
    }
    Ok(mdproxy_api::parse_target(target)?.target)
}

/// The refusal of `target=/stock/kline?code=000001&period=week`: the target's own
/// query came unencoded, so its `&period=week` reached the purge as a parameter of
/// its own and the target read would be another key. Names `target` and gives the
/// encoded form of what was probably meant.
fn unencoded_target(target: &str, others: &[(String, String)]) -> Error {
    let rest: Vec<String> = others.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let meant = format!("{target}&{}", rest.join("&"));
    let encoded: String = form_urlencoded::byte_serialize(meant.as_bytes()).collect();
    Error::invalid(
        "target",
        format!(
            "{} reached the purge as its own parameter: percent-encode the target's query (& as %26), as in target={encoded}",
            others[0].0
        ),
    )
}
