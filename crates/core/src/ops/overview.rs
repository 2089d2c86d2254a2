//! What `/status.json` says (and the `/status` page renders): the node, the market,
//! the cache and its disk tier, the fleet, the upstream instances and their
//! protections, traffic per endpoint, the hub, reloads, the scheduler's jobs and
//! the sampled history. Read from the subsystems at each request; it changes
//! nothing.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use crate::hub::QuoteHub;
use crate::ops::history::History;
use crate::ops::reload_log::ReloadLog;
use crate::ops::scheduler::Jobs;
use crate::state::AppState;
use crate::stats::histogram::{LATENCY_BUCKETS, quantile};
use crate::stats::{CacheStatus, Outcome};
use crate::upstream::UpstreamOutcome;
use mdproxy_api::catalog::catalog;

/// What the status page reads.
pub struct Overview {
    pub state: AppState,
    pub hub: QuoteHub,
    /// The scheduler's jobs (empty when it is off).
    pub jobs: Jobs,
    /// The sampled traffic history.
    pub history: History,
    pub reloads: Arc<ReloadLog>,
    /// When the node started, for its uptime.
    pub started: DateTime<Utc>,
    /// The MCP endpoint, when `[mcp]` is on.
    pub mcp: Option<Arc<crate::mcp::Mcp>>,
}

impl Overview {
    /// The whole document.
    pub fn json(&self) -> Value {
        let state = &self.state;
        let snap = state.snapshot();
        let entries = state.cache().store().entry_count();
        let (endpoints, all) = self.endpoints();
        json!({
            "version": crate::build::VERSION,
            "commit": crate::build::commit(),
            "started": china_time(self.started),
            "uptime_secs": (Utc::now() - self.started).num_seconds(),
            "ready": match state.upstream().health().readiness(entries) {
                Ok(why) => json!({ "ready": true, "reason": why.to_string() }),
                Err(why) => json!({ "ready": false, "reason": why.to_string() }),
            },
            "config_generation": snap.generation,
            "time": china_time(state.clock().now()),
            "market": self.market(),
            "cache": self.cache(),
            "disk": state.cache().store().disk().map_or_else(|| json!({ "state": "off" }), disk_json),
            "cluster": self.cluster(),
            "upstream": self.upstream(),
            "requests": {
                "total": all.iter().sum::<u64>(),
                "latency": percentiles(&all),
            },
            "endpoints": endpoints,
            "hub": self.hub(),
            "mcp": self.mcp(),
            "reloads": self.reloads.records().into_iter().rev().map(|r| json!({
                "at": china_time(r.at), "applied": r.applied, "detail": r.detail,
            })).collect::<Vec<_>>(),
            "scheduler": self.scheduler(),
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

    /// Traffic per endpoint asked at least once, and the latency buckets of all.
    fn endpoints(&self) -> (Vec<Value>, [u64; LATENCY_BUCKETS.len() + 1]) {
        let (state, snap) = (&self.state, self.state.snapshot());
        let requests = state.requests();
        let mut all = [0u64; LATENCY_BUCKETS.len() + 1];
        let rates = self.history.rates();
        let endpoints = catalog()
            .with_passthrough()
            .filter_map(|e| {
                let [hit, miss, stale] = [CacheStatus::Hit, CacheStatus::Miss, CacheStatus::Stale]
                    .map(|s| requests.served_count(e.id, s));
                let total = hit + miss + stale;
                let class = if e == catalog().passthrough() {
                    snap.config.passthrough.class
                } else {
                    e.class
                };
                let mut buckets = [0u64; LATENCY_BUCKETS.len() + 1];
                for outcome in Outcome::ALL {
                    requests.latency(e.id, outcome).merge_into(&mut buckets);
                }
                for (a, b) in all.iter_mut().zip(buckets) {
                    *a += b;
                }
                let asked: u64 = buckets.iter().sum();
                (asked > 0).then(|| {
                    json!({
                        "endpoint": e.path, "class": class.as_str(),
                        "requests": asked,
                        "rps": rates.as_ref().and_then(|r| r.get(e.id)).map(|r| round(*r, 2)),
                        "hit": hit, "miss": miss, "stale": stale,
                        "hit_ratio": (total > 0).then(|| round((hit + stale) as f64 / total as f64, 3)),
                        "latency": percentiles(&buckets),
                    })
                })
            })
            .collect();
        (endpoints, all)
    }

    /// The market's phase and its next open and last close.
    fn market(&self) -> Value {
        let now = self.state.clock().now();
        let snap = self.state.snapshot();
        let calendar = snap.policy.calendar();
        let year = chrono::Datelike::year(&now.with_timezone(&chrono_tz::Asia::Shanghai));
        json!({
            "phase": calendar.phase(now).as_str(),
            "next_open": china_time(calendar.next_open(now)),
            "last_close": china_time(calendar.last_close(now)),
            "calendar_covers_this_year": calendar.covers(year),
        })
    }

    /// What memory holds.
    fn cache(&self) -> Value {
        let store = self.state.cache().store();
        json!({
            "entries": store.entry_count(),
            "bytes": store.weighted_size(),
            "max_bytes": store.max_bytes(),
            "evictions": store.evictions(),
        })
    }

    /// The fleet as this node sees it.
    fn cluster(&self) -> Value {
        self.state.cluster().map_or_else(
            || json!({ "state": "off" }),
            |c| {
                json!({
                    "state": if c.is_up() { "up" } else { "alone" },
                    "node_id": c.node_id(),
                    "shared_hits": c.shared_hits(),
                    "redis": c.redis_address(),
                    "failovers": c.failovers(),
                    "alone_seconds": c.alone_for().as_secs(),
                })
            },
        )
    }

    /// The upstream: its instances, what was last heard, and the outcomes.
    fn upstream(&self) -> Value {
        let (state, snap) = (&self.state, self.state.snapshot());
        let (upstream, heard) = (state.upstream(), state.upstream().health().heard());
        let counters = upstream.counters();
        json!({
            "base_url": mdproxy_config::redacted_url(&snap.config.upstream.base_url),
            "breaker_open": upstream.breaker_open(),
            "targets": upstream.report().iter().map(target_json).collect::<Vec<_>>(),
            "keys_backing_off": state.cache().failures().len(),
            "last_ok": heard.last_ok.map(china_time),
            "last_error": heard.last_error.map(|(at, outcome, detail)| json!({
                "at": china_time(at), "outcome": outcome, "detail": detail,
            })),
            "budget_dropped": counters.dropped(),
            "outcomes": UpstreamOutcome::ALL
                .iter()
                .map(|o| (o.as_str().to_owned(), json!(counters.outcome_count(*o))))
                .collect::<serde_json::Map<_, _>>(),
            "errors_served": state.requests().errors(),
        })
    }

    /// The quote hub.
    fn hub(&self) -> Value {
        let hub = &self.hub;
        json!({
            "polling": hub.is_polling(), "subscribers": hub.subscribers(), "codes": hub.codes(),
            "polls": hub.polls(), "stalled": hub.stalled(),
            "poll_interval_ms": hub.pacing().interval.as_millis() as u64,
            "slowed_by": hub.pacing().held_by,
        })
    }

    /// The MCP endpoint: its open sessions and tool calls by tool and outcome.
    fn mcp(&self) -> Value {
        let Some(mcp) = &self.mcp else {
            return json!({ "enabled": false });
        };
        json!({
            "enabled": true,
            "sessions": mcp.sessions(),
            "calls": mcp.calls().counted().into_iter().map(|(tool, outcome, n)| json!({
                "tool": tool, "outcome": outcome.as_str(), "calls": n,
            })).collect::<Vec<_>>(),
        })
    }

    /// The scheduler's jobs: their plans, runs and next firings.
    fn scheduler(&self) -> Value {
        let jobs = self.jobs.view(Utc::now());
        json!({
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
        })
    }
}

/// One upstream instance's protections as `/status.json` shows them.
fn target_json(t: &crate::upstream::target::TargetReport) -> Value {
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

/// The disk tier's part of `/status.json`.
fn disk_json(disk: &crate::cache::disk::Disk) -> Value {
    let s = disk.stats();
    let n = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
    let latency = &s.read_latency;
    json!({
        "state": if disk.is_writable() { "up" } else { "failing" },
        "failure": disk.failure(),
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
fn percentiles(buckets: &[u64; LATENCY_BUCKETS.len() + 1]) -> Value {
    let ms = |q| {
        quantile(buckets, q).map(|s| {
            if s.is_finite() {
                round(s * 1000.0, 2)
            } else {
                f64::MAX
            }
        })
    };
    json!({ "p50_ms": ms(0.5), "p90_ms": ms(0.9), "p99_ms": ms(0.99) })
}
