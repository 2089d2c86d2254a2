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
use crate::hub::QuoteHub;
use crate::ops::history::History;
use crate::ops::metrics::Metrics;
use crate::ops::scheduler::Jobs;
use crate::state::AppState;
use crate::stats::{self, CacheStatus, LATENCY_BUCKETS, Outcome, Stats, UpstreamOutcome};
use mdproxy_api::catalog::catalog;
use mdproxy_api::error::Error;

/// What the admin listener reads: the shared state, the hub, the metrics
/// registry (built once), the scheduler's jobs and the sampled traffic history.
pub struct Admin {
    state: AppState,
    hub: QuoteHub,
    metrics: Metrics,
    jobs: Jobs,
    history: History,
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
    /// The admin service over `state` and `hub`; `/status` also shows `jobs` and
    /// `history`.
    pub fn new(state: AppState, hub: QuoteHub, jobs: Jobs, history: History) -> Admin {
        let metrics = Metrics::new(state.clone(), hub.clone());
        Admin {
            state,
            hub,
            metrics,
            jobs,
            history,
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
            (&Method::GET, "/readyz") => match state.readiness() {
                Ok(why) => json_response(StatusCode::OK, &json!({ "ready": true, "reason": why })),
                Err(why) => json_response(
                    StatusCode::SERVICE_UNAVAILABLE,
                    &json!({ "ready": false, "reason": why }),
                ),
            },
            (&Method::GET, "/status.json") => json_response(StatusCode::OK, &self.status()),
            (&Method::POST, "/purge") => match purge(state, &request).await {
                Ok(report) => json_response(StatusCode::OK, &report),
                Err(e) => e.to_response(),
            },
            (&Method::GET, "/status") => crate::ops::status::page(&self.status()),
            (_, "/purge") => Error::MethodNotAllowed { allow: "POST" }.to_response(),
            (_, "/metrics" | "/healthz" | "/readyz" | "/status" | "/status.json") => {
                Error::MethodNotAllowed { allow: "GET" }.to_response()
            }
            _ => Error::NotFound.to_response(),
        };
        Ok(response)
    }
}

/// One upstream instance's protections as `/status.json` shows them.
fn target_json(t: &crate::upstream::target::TargetReport) -> serde_json::Value {
    let secs = |d: std::time::Duration| (d.as_secs_f64() * 10.0).round() / 10.0;
    json!({
        "label": t.label,
        "base_url": t.base_url,
        "paused_for_secs": t.paused_for.map(secs),
        "pauses": t.pauses,
        "breaker_open": t.breaker_open,
        "open_routes": t.open_routes,
        "rate": {
            "current_rps": (t.pace.rate * 100.0).round() / 100.0,
            "ceiling_rps": t.pace.ceiling,
            "floor_rps": t.pace.floor,
            "last_decrease_reason": t.pace.reason,
            "decreases": t.pace.decreases,
            "full_rate_in_secs": secs(t.pace.full_in),
        },
        "quota": {
            "per_minute": t.quota.per_minute,
            "per_day": t.quota.per_day,
            "this_minute": t.quota.this_minute,
            "today": t.quota.today,
            "projected_today": t.quota.projected_day,
            "skipped_today": t.quota.skipped_today,
            "preferring_stale": t.quota.thrifty,
        },
        "outcomes": t.outcomes.iter()
            .filter(|(_, n)| *n > 0)
            .map(|(o, n)| (o.as_str().to_owned(), json!(n)))
            .collect::<serde_json::Map<_, _>>(),
    })
}

/// Drops cached answers: `POST /purge` with `Authorization: Bearer <admin.token>`
/// and one of
/// - `target=/stock/detail/600519`: that one answer (canonicalised like a request,
///   so parameter order and defaults do not matter; its own query percent-encoded,
///   `target=%2Fstock%2Fkline%3Fcode%3D600519%26period%3Dweek`);
/// - `endpoint=/stock/detail/{code}`: every answer of that endpoint (the template as
///   in the catalogue);
/// - `prefix=/stock/`: every key starting so (like a Varnish ban on the URL).
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
            // The parameter's own error (naming `period`, `code`...), or `not_found`.
            let valid = mdproxy_api::parse_target(raw)?;
            let held = cache.purge(&Purge::Key(valid.target.clone())).await;
            (valid.target, held)
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
                            "no endpoint template {template}; see /api/v1/openapi.json for the list"
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

/// The disk tier's part of `/status.json`.
fn disk_json(disk: &crate::cache::disk::Disk) -> serde_json::Value {
    let s = disk.stats();
    let n = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
    let latency = &s.read_latency;
    json!({
        "state": if disk.is_writable() { "up" } else { "failing" },
        "path": disk.path().display().to_string(),
        "bytes": disk.used_bytes(),
        "max_bytes": disk.capacity(),
        "entries_estimate": disk.entries_estimate(),
        "open_ms": disk.opened_in().as_millis() as u64,
        "hits": n(&s.hits),
        "promoted": n(&s.promoted),
        "misses": n(&s.misses),
        "writes": n(&s.writes),
        "written_bytes": n(&s.written_bytes),
        "read_ms_mean": if latency.count() > 0 {
            round(latency.sum_secs() * 1e3 / latency.count() as f64, 3)
        } else {
            0.0
        },
        "purge_rules": disk.purge_rules(),
        "engine_reads": {
            "page_cache": n(&disk.read_paths().in_place),
            "pool": n(&disk.read_paths().pooled),
            "in_place_supported": disk.read_paths().in_place_supported(),
        },
        "dropped": {
            "corrupt": n(&s.corrupt),
            "truncated": n(&s.truncated),
            "foreign": n(&s.foreign),
            "expired": n(&s.expired),
            "purged": n(&s.purged),
            "too_large": n(&s.too_large),
            "queue_full": n(&s.queue_full),
            "write_failures": n(&s.write_failures),
            "read_errors": n(&s.read_errors),
        },
    })
}

/// A time as an operator in China reads it: `2026-11-23 09:30:00 CST`.
fn china_time(t: chrono::DateTime<chrono::Utc>) -> String {
    t.with_timezone(&chrono_tz::Asia::Shanghai)
        .format("%Y-%m-%d %H:%M:%S %Z")
        .to_string()
}

/// Rounded to `digits` decimals, for people.
fn round(x: f64, digits: i32) -> f64 {
    let k = 10f64.powi(digits);
    (x * k).round() / k
}

/// p50/p90/p99 in milliseconds of a set of per-bucket counts.
fn percentiles(buckets: &[u64; LATENCY_BUCKETS.len() + 1]) -> serde_json::Value {
    let ms = |q| {
        stats::quantile(buckets, q).map(|s| {
            if s.is_finite() {
                round(s * 1000.0, 2)
            } else {
                f64::MAX
            }
        })
    };
    json!({ "p50_ms": ms(0.5), "p90_ms": ms(0.9), "p99_ms": ms(0.99) })
}

impl Admin {
    /// What an operator reads (`/status.json`; the `/status` page renders it).
    fn status(&self) -> serde_json::Value {
        let state = &self.state;
        let snap = state.snapshot();
        let stats = state.stats();
        let now = state.clock().now();
        let calendar = snap.policy.calendar();
        let mut all = [0u64; LATENCY_BUCKETS.len() + 1];
        let rates = self.history.rates();
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
                let mut buckets = [0u64; LATENCY_BUCKETS.len() + 1];
                for outcome in Outcome::ALL {
                    stats.latency(e.id, outcome).merge_into(&mut buckets);
                }
                for (a, b) in all.iter_mut().zip(buckets) {
                    *a += b;
                }
                let requests: u64 = buckets.iter().sum();
                (requests > 0).then(|| {
                    json!({
                        "endpoint": e.path, "class": class.as_str(),
                        "requests": requests,
                        "rps": rates.as_ref().and_then(|r| r.get(e.id)).map(|r| round(*r, 2)),
                        "hit": hit, "miss": miss, "stale": stale,
                        "hit_ratio": (total > 0).then(|| round((hit + stale) as f64 / total as f64, 3)),
                        "latency": percentiles(&buckets),
                    })
                })
            })
            .collect();
        let hub = &self.hub;
        let store = state.cache().store();
        let health = stats.upstream_health();
        let uptime = chrono::Utc::now() - stats.started;
        let jobs = self.jobs.view(chrono::Utc::now());
        json!({
            "version": crate::build::VERSION,
            "commit": crate::build::commit(),
            "started": china_time(stats.started),
            "uptime_secs": uptime.num_seconds(),
            "ready": match state.readiness() {
                Ok(why) => json!({ "ready": true, "reason": why }),
                Err(why) => json!({ "ready": false, "reason": why }),
            },
            "config_generation": snap.generation,
            "time": china_time(now),
            "market": {
                "phase": calendar.phase(now).as_str(),
                "next_open": china_time(calendar.next_open(now)),
                "last_close": china_time(calendar.last_close(now)),
                "calendar_covers_this_year": calendar.covers(chrono::Datelike::year(&now.with_timezone(&chrono_tz::Asia::Shanghai))),
            },
            "cache": {
                "entries": store.entry_count(),
                "bytes": store.weighted_size(),
                "max_bytes": store.max_bytes(),
                "evictions": store.evictions(),
            },
            "disk": store.disk().map_or_else(|| json!({ "state": "off" }), disk_json),
            "cluster": state.cluster().map_or_else(
                || json!({ "state": "off" }),
                |c| json!({
                    "state": if c.is_up() { "up" } else { "alone" },
                    "node_id": c.node_id(),
                    "shared_hits": c.shared_hits(),
                    "redis": c.redis_address(),
                    "failovers": c.failovers(),
                    "alone_seconds": c.alone_for().as_secs(),
                }),
            ),
            "upstream": {
                "base_url": mdproxy_config::redacted_url(&snap.config.upstream.base_url),
                "breaker_open": state.upstream().breaker_open(),
                "targets": state.upstream().report().iter().map(target_json).collect::<Vec<_>>(),
                "keys_backing_off": state.cache().failures().len(),
                "last_ok": health.last_ok.map(china_time),
                "last_error": health.last_error.map(|(at, outcome, detail)| json!({
                    "at": china_time(at), "outcome": outcome, "detail": detail,
                })),
                "budget_dropped": Stats::get(&stats.budget_dropped),
                "outcomes": UpstreamOutcome::ALL
                    .iter()
                    .map(|o| (o.as_str().to_owned(), json!(stats.upstream_count(*o))))
                    .collect::<serde_json::Map<_, _>>(),
                "errors_served": Stats::get(&stats.errors),
            },
            "requests": {
                "total": all.iter().sum::<u64>(),
                "latency": percentiles(&all),
            },
            "endpoints": endpoints,
            "hub": {
                "polling": hub.is_polling(), "subscribers": hub.subscribers(), "codes": hub.codes(),
                "polls": hub.polls(), "stalled": hub.stalled(),
                "poll_interval_ms": hub.pacing().interval.as_millis() as u64,
                "slowed_by": hub.pacing().held_by,
            },
            "reloads": stats.reloads().into_iter().rev().map(|r| json!({
                "at": china_time(r.at), "applied": r.applied, "detail": r.detail,
            })).collect::<Vec<_>>(),
            "scheduler": {
                "running": !jobs.is_empty(),
                "jobs": jobs.iter().map(|j| json!({
                    "name": j.plan.name,
                    "cron": j.plan.cron,
                    "when": j.plan.when.as_str(),
                    "on_demand": j.plan.on_demand,
                    "force": j.plan.force,
                    "targets": j.plan.targets.iter().map(|t| t.target.as_str()).collect::<Vec<_>>(),
                    "runs": j.runs,
                    "last_run": j.last_run.as_ref().map(|(at, ran)| json!({
                        "at": china_time(*at), "result": ran.to_string(),
                        "ok": ran.is_ok(), "skipped": ran.is_skipped(),
                    })),
                    "next_run": j.next_run.map(china_time),
                })).collect::<Vec<_>>(),
            },
            "history_every_secs": self.history.every().as_secs(),
            "history": self.history.samples().iter().map(|s| json!({
                "t": s.at.timestamp(),
                "at": china_time(s.at),
                "requests": s.requests,
                "rps": round(s.rps(), 2),
                "hit_ratio": s.hit_ratio().map(|r| round(r, 3)),
            })).collect::<Vec<_>>(),
        })
    }
}
