//! The admin listener (a separate address, for operators and scrapers): `/metrics`
//! (Prometheus text), `/healthz`, `/readyz`, `/status` (hit ratio per endpoint,
//! upstream outcomes, market, streams) and `POST /purge?target=...` behind the admin
//! token. Nothing here is reachable from the client listener.

use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use serde_json::json;

use crate::api::catalog::catalog;
use crate::edge::body::{self, Body};
use crate::edge::response::IntoResponse;
use crate::error::Error;
use crate::hub::QuoteHub;
use crate::ops::metrics::Metrics;
use crate::state::AppState;
use crate::stats::{CacheStatus, Stats, UpstreamOutcome};

/// What the admin listener reads: the shared state, the hub and the metrics
/// registry (built once).
pub struct Admin {
    state: AppState,
    hub: QuoteHub,
    metrics: Metrics,
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
    /// The admin service over `state` and `hub`.
    pub fn new(state: AppState, hub: QuoteHub) -> Admin {
        let metrics = Metrics::new(state.clone(), hub.clone());
        Admin {
            state,
            hub,
            metrics,
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
                    HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
                );
                r
            }
            (&Method::GET, "/healthz") => json_response(StatusCode::OK, &json!({ "status": "ok" })),
            // The proxy can answer from its cache whatever the upstream does, so it is
            // ready as soon as it listens; the upstream's health is in /status.
            (&Method::GET, "/readyz") => json_response(StatusCode::OK, &json!({ "ready": true })),
            (&Method::GET, "/status") => json_response(StatusCode::OK, &self.status()),
            (&Method::POST, "/purge") => match purge(state, &request).await {
                Ok(target) => json_response(StatusCode::OK, &json!({ "purged": target })),
                Err(e) => e.to_response(),
            },
            (_, "/metrics" | "/healthz" | "/readyz" | "/status" | "/purge") => {
                Error::MethodNotAllowed.to_response()
            }
            _ => Error::NotFound.to_response(),
        };
        Ok(response)
    }
}

/// Drops one cached answer: `POST /purge?target=/stock/detail/600519` with
/// `Authorization: Bearer <admin.token>`. The target is canonicalised like a request.
async fn purge<B>(state: &AppState, request: &Request<B>) -> Result<String, Error> {
    let snap = state.snapshot();
    let presented = crate::edge::auth::bearer(request.headers()).unwrap_or_default();
    if !snap.config.admin.token.matches(presented) {
        return Err(Error::Unauthorized);
    }
    let raw = form_urlencoded::parse(request.uri().query().unwrap_or_default().as_bytes())
        .find(|(k, _)| k == "target")
        .map(|(_, v)| v.into_owned())
        .ok_or(Error::MissingParameter {
            param: "target".into(),
        })?;
    // The parameter's own error (naming `period`, `code`...), or `not_found`.
    let valid = crate::api::parse_target(&raw)?;
    state.cache().purge(&valid.target).await;
    tracing::info!(target = %valid.target, "purged");
    Ok(valid.target)
}

impl Admin {
    /// What an operator reads.
    fn status(&self) -> serde_json::Value {
        let state = &self.state;
        let snap = state.snapshot();
        let stats = state.stats();
        let now = state.clock().now();
        let calendar = snap.policy.calendar();
        let endpoints: Vec<serde_json::Value> = catalog()
            .with_passthrough()
            .filter_map(|e| {
                let [hit, miss, stale] = [CacheStatus::Hit, CacheStatus::Miss, CacheStatus::Stale]
                    .map(|s| stats.served_count(e.id, s));
                let total = hit + miss + stale;
                let class = if e == catalog().passthrough() {
                    snap.config.passthrough.class
                } else {
                    e.class
                };
                (total > 0).then(|| {
                    json!({
                        "endpoint": e.path, "class": class.as_str(),
                        "hit": hit, "miss": miss, "stale": stale,
                        "hit_ratio": (hit + stale) as f64 / total as f64,
                    })
                })
            })
            .collect();
        let hub = &self.hub;
        let store = state.cache().store();
        json!({
            "config_generation": snap.generation,
            "time": now.to_rfc3339(),
            "market": {
                "phase": calendar.phase(now).as_str(),
                "next_open": calendar.next_open(now).to_rfc3339(),
                "last_close": calendar.last_close(now).to_rfc3339(),
                "calendar_covers_this_year": calendar.covers(chrono::Datelike::year(&now.with_timezone(&chrono_tz::Asia::Shanghai))),
            },
            "cache": { "entries": store.entry_count(), "bytes": store.weighted_size() },
            "cluster": state.cache().cluster().map_or_else(
                || json!({ "state": "off" }),
                |c| json!({
                    "state": if c.is_up() { "up" } else { "alone" },
                    "node_id": c.node_id(),
                    "shared_hits": c.shared_hits(),
                }),
            ),
            "upstream": {
                "base_url": snap.config.upstream.base_url,
                "budget_dropped": Stats::get(&stats.budget_dropped),
            "outcomes": UpstreamOutcome::ALL
                .iter()
                .map(|o| (o.as_str().to_owned(), json!(stats.upstream_count(*o))))
                .collect::<serde_json::Map<_, _>>(),
                "errors_served": Stats::get(&stats.errors),
            },
            "endpoints": endpoints,
            "hub": {
                "polling": hub.is_polling(), "subscribers": hub.subscribers(), "codes": hub.codes(),
                "polls": hub.polls(), "stalled": hub.stalled(),
            },
        })
    }
}
