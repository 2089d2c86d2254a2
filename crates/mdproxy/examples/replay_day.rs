//! A day of dashboard traffic replayed against the throttling simulator on an
//! accelerated clock, once with mdproxy's upstream protection (the adaptive rate and
//! the quotas) and once without, printing what each run spent and served (issue 27).
//!
//! The simulator and the proxy run in process on one clock that runs `REPLAY_FACTOR`
//! (default 120) times faster than real time, from `REPLAY_FROM` to `REPLAY_TO` China
//! time (default 09:00 to 15:30) of a trading day. The source behind the simulator
//! tolerates `REPLAY_TOLERATED` requests a minute (default 180); past them it warns
//! (`200` + `success:false`, "socket hang up") and, past as many again in one minute,
//! bans the key for two hours (`REPLAY_MODE=ban`, the default), or answers `429` with
//! `Retry-After` (`REPLAY_MODE=429`).
//!
//! `REPLAY_USERS` dashboards (default 8) follow the session timetable: the overview
//! (indices, flows, the hotmap, news) polled every 30 s in session and every minute
//! out of it, and stock pages opened about every 90 s in session (every 5 minutes at
//! lunch and after the close), three at once at the 09:30 open. A page is ~20
//! requests for one stock (the detail twice at the same moment, quotes, K-lines,
//! financials, holders, peers, diagnosis, news), sent 6-10 at once as the real
//! dashboards do; its stock is one of the user's watchlist (drawn from 300 popular
//! stocks) or, one time in four, a cold stock from the whole market. The same seed
//! gives both runs the same traffic.
//!
//! Prints, for each run: the upstream requests spent, the bans triggered, the
//! throttling answers, the answers served stale, the client errors and those for
//! keys that had been answered before. `scripts/replay-day.sh` builds it in release
//! and runs it.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, NaiveDate, NaiveTime, TimeZone, Utc};
use chrono_tz::Asia::Shanghai;
use mdproxy_config::{Config, Secret};
use mdproxy_market::{Clock, ScaledClock};
use mdproxy_sim::{SimConfig, ThrottleMode, Throttling};

const TOKEN: &str = "replay-token";
/// The replayed day: a Monday the built-in calendar trades on.
const DAY: (i32, u32, u32) = (2026, 3, 9);

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// What the replay is asked for.
#[derive(Clone, Debug)]
struct Options {
    factor: f64,
    from: NaiveTime,
    to: NaiveTime,
    users: usize,
    tolerated: u64,
    ban: bool,
    seed: u64,
    per_day: u64,
    per_minute: u64,
}

impl Options {
    fn from_env() -> Options {
        let time = |name, default| {
            NaiveTime::parse_from_str(&env_or(name, String::from(default)), "%H:%M")
                .unwrap_or_else(|_| panic!("{name} is HH:MM"))
        };
        Options {
            factor: env_or("REPLAY_FACTOR", 120.0),
            from: time("REPLAY_FROM", "09:00"),
            to: time("REPLAY_TO", "15:30"),
            users: env_or("REPLAY_USERS", 8),
            tolerated: env_or("REPLAY_TOLERATED", 180),
            ban: env_or("REPLAY_MODE", String::from("ban")) != "429",
            seed: env_or("REPLAY_SEED", 27),
            per_day: env_or("REPLAY_PER_DAY", 30_000),
            per_minute: env_or("REPLAY_PER_MINUTE", 0),
        }
    }

    /// `t` of the replayed day, China time.
    fn at(&self, t: NaiveTime) -> DateTime<Utc> {
        let day = NaiveDate::from_ymd_opt(DAY.0, DAY.1, DAY.2).expect("a real date");
        Shanghai
            .from_local_datetime(&day.and_time(t))
            .single()
            .expect("China has no DST")
            .to_utc()
    }
}

/// What one run counted on the client side.
#[derive(Debug, Default)]
struct Counts {
    requests: AtomicU64,
    stale: AtomicU64,
    errors: AtomicU64,
    /// Errors for a target that had been answered before.
    errors_cached: AtomicU64,
    /// Error answers by status (and `200` with `success:false`).
    by_status: Mutex<std::collections::BTreeMap<String, u64>>,
    answered: Mutex<HashSet<String>>,
}

/// One run's whole context.
struct Run {
    options: Options,
    clock: Arc<ScaledClock>,
    base: String,
    client: reqwest::Client,
    counts: Counts,
    watch_pool: Vec<String>,
    market: Vec<String>,
}

impl Run {
    /// Seconds of the replayed day since its start.
    fn now(&self) -> f64 {
        (self.clock.now() - self.options.at(self.options.from)).as_seconds_f64()
    }

    fn end(&self) -> f64 {
        (self.options.at(self.options.to) - self.options.at(self.options.from)).as_seconds_f64()
    }

    /// Sleeps until `t` seconds of the replayed day.
    async fn until(&self, t: f64) {
        let ahead = t - self.now();
        if ahead > 0.0 {
            tokio::time::sleep(self.clock.to_real(Duration::from_secs_f64(ahead))).await;
        }
    }

    /// The China time `t` seconds into the replay.
    fn time_of(&self, t: f64) -> NaiveTime {
        let at =
            self.options.at(self.options.from) + chrono::Duration::milliseconds((t * 1e3) as i64);
        at.with_timezone(&Shanghai).time()
    }

    async fn get(&self, target: String) {
        self.counts.requests.fetch_add(1, Ordering::Relaxed);
        let sent = self
            .client
            .get(format!("{}{target}", self.base))
            .bearer_auth(TOKEN)
            .send()
            .await;
        let kind = match sent {
            Ok(r) => {
                let status = r.status().as_u16();
                let stale = r.headers().get("x-cache").is_some_and(|v| v == "STALE");
                let body = r.bytes().await.unwrap_or_default();
                // The envelope's `success`, wherever it stands (keys are sorted:
                // after `data`).
                let ok = status == 200
                    && serde_json::from_slice::<serde_json::Value>(&body)
                        .is_ok_and(|v| v["success"] == serde_json::Value::Bool(true));
                if ok {
                    if stale {
                        self.counts.stale.fetch_add(1, Ordering::Relaxed);
                    }
                    lock(&self.counts.answered).insert(target);
                    return;
                }
                if status == 200 {
                    "200 success:false".to_owned()
                } else {
                    status.to_string()
                }
            }
            Err(e) => format!("transport: {e}"),
        };
        self.counts.errors.fetch_add(1, Ordering::Relaxed);
        if lock(&self.counts.answered).contains(&target) {
            self.counts.errors_cached.fetch_add(1, Ordering::Relaxed);
        }
        *lock(&self.counts.by_status).entry(kind).or_default() += 1;
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The dashboard's overview, polled.
const OVERVIEW: [&str; 6] = [
    "/market/indices",
    "/market/flow",
    "/market/sector-flow/summary",
    "/market/hotmap",
    "/news/overview",
    "/market/stocks/realtime-list?market=cn_a",
];

/// A stock page: the endpoints a dashboard asks for one stock (the detail twice).
const PAGE: [&str; 20] = [
    "/stock/detail/{code}",
    "/stock/detail/{code}",
    "/stock/indicator/realtime/{code}",
    "/stock/kline?code={code}&period=day",
    "/stock/kline?code={code}&period=5m",
    "/stock/indicator/financial/{code}",
    "/stock/financial/snapshot/{code}?reportDate=2025-12-31",
    "/stock/financial/ratio/{code}",
    "/stock/business/main/{code}",
    "/stock/shareholder/research/latest/{code}",
    "/stock/performance/ten-years/latest/{code}",
    "/stock/peers/{code}",
    "/stock/company/operations/{code}",
    "/stock/industry/info/{code}",
    "/stock/board/info/{code}",
    "/stock/diagnosis/comprehensive/{code}",
    "/stock/diagnosis/message/{code}",
    "/stock/theme/core/{code}",
    "/stock/news?code={code}",
    "/stock/valuation/historical-pe?code={code}",
];

/// Seconds between polls and the mean seconds between pages at China time `t`.
fn cadence(t: NaiveTime) -> (f64, Option<f64>) {
    let hm = |h, m| NaiveTime::from_hms_opt(h, m, 0).expect("a valid time");
    if t < hm(9, 15) {
        (60.0, None)
    } else if t < hm(9, 30) {
        (30.0, Some(300.0))
    } else if t < hm(11, 30) || (t >= hm(13, 0) && t < hm(15, 0)) {
        (30.0, Some(90.0))
    } else {
        (60.0, Some(300.0))
    }
}

/// One stock page: ~20 requests, 6-10 at once.
async fn page(run: &Run, rng: &mut fastrand::Rng, code: &str) {
    let mut targets: Vec<String> = PAGE.iter().map(|p| p.replace("{code}", code)).collect();
    // The detail goes out twice at the same moment; the rest in a browser's order.
    let mut rest = targets.split_off(2);
    rng.shuffle(&mut rest);
    let mut burst = targets;
    let mut rest = rest.into_iter();
    loop {
        let size = rng.usize(6..=10);
        while burst.len() < size {
            let Some(t) = rest.next() else { break };
            burst.push(t);
        }
        if burst.is_empty() {
            return;
        }
        futures_util::future::join_all(burst.drain(..).map(|t| run.get(t))).await;
    }
}

/// One dashboard for the whole day.
async fn dashboard(run: Arc<Run>, user: usize) {
    let mut rng = fastrand::Rng::with_seed(run.options.seed ^ (user as u64 * 0x9E37_79B9));
    let watchlist: Vec<String> = (0..15)
        .map(|_| {
            // Popular stocks, the first ones the most (a Zipf-like draw).
            let i = ((rng.f64().powi(2)) * run.watch_pool.len() as f64) as usize;
            run.watch_pool[i.min(run.watch_pool.len() - 1)].clone()
        })
        .collect();
    let open = (run
        .options
        .at(NaiveTime::from_hms_opt(9, 30, 0).expect("09:30"))
        - run.options.at(run.options.from))
    .as_seconds_f64();
    let mut next_poll = rng.f64() * 30.0;
    let mut next_page = if open >= 0.0 {
        open + rng.f64() * 2.0
    } else {
        rng.f64() * 90.0
    };
    let mut opened_at_open = false;
    let end = run.end();
    loop {
        let t = next_poll.min(next_page);
        if t >= end {
            return;
        }
        run.until(t).await;
        let (poll_every, page_every) = cadence(run.time_of(t));
        if t == next_poll {
            let polls = OVERVIEW.iter().map(|p| run.get((*p).to_owned()));
            futures_util::future::join_all(polls).await;
            next_poll = t + poll_every * (0.9 + rng.f64() * 0.2);
            continue;
        }
        // At the open every dashboard opens three pages at once.
        let pages = if !opened_at_open && t >= open { 3 } else { 1 };
        opened_at_open |= t >= open;
        let chosen: Vec<(String, u64)> = (0..pages)
            .map(|_| {
                let code = if rng.u32(0..4) == 0 {
                    run.market[rng.usize(..run.market.len())].clone()
                } else {
                    watchlist[rng.usize(..watchlist.len())].clone()
                };
                (code, rng.u64(..))
            })
            .collect();
        let run = &run;
        futures_util::future::join_all(chosen.iter().map(|(code, seed)| async move {
            page(run, &mut fastrand::Rng::with_seed(*seed), code).await;
        }))
        .await;
        next_page = match page_every {
            // Exponential gaps around the mean (the minus applies to the logarithm:
            // written `-x.ln().max(..)` it took the max first, every gap came out
            // negative and the replay never reached its end).
            Some(mean) => t + mean * (-(1.0 - rng.f64()).ln()).max(0.05),
            None => t + 60.0,
        };
    }
}

/// What one run spent and served.
struct Outcome {
    name: &'static str,
    upstream: u64,
    bans: u64,
    throttled: u64,
    requests: u64,
    stale: u64,
    errors: u64,
    errors_cached: u64,
    by_status: std::collections::BTreeMap<String, u64>,
    decreases: u64,
    skipped: u64,
}

async fn run(options: &Options, protected: bool) -> Outcome {
    let clock = ScaledClock::new(options.at(options.from), options.factor);
    let sim = mdproxy_sim::start(
        &SimConfig {
            listen: "127.0.0.1:0".into(),
            token: "replay-upstream-key".into(),
            ..SimConfig::default()
        },
        clock.clone(),
    )
    .await
    .expect("the simulator starts");
    let mode = if options.ban {
        ThrottleMode::WarnThenBan {
            warnings: options.tolerated,
            lasts: Duration::from_secs(2 * 3_600),
        }
    } else {
        ThrottleMode::TooManyRequests
    };
    sim.set_throttling(Some(Throttling {
        limit: options.tolerated,
        window: Duration::from_secs(60),
        mode,
    }));
    let mut config: Config = mdproxy::demo::config_for(&sim, "127.0.0.1:0", Secret::new(TOKEN));
    config.scheduler.enabled = false;
    config.upstream.probe_target = String::new();
    // Real milliseconds: what a client waits, and the backoff of a failing key, are
    // scaled to the replayed clock; the upstream timeout stays generous (the
    // simulator never hangs here, the machine may stall).
    let real_ms = |sim_ms: f64| (sim_ms / options.factor).ceil().max(1.0) as u64;
    config.limits.client_wait_ms = real_ms(5_000.0);
    config.limits.failure_backoff_ms = real_ms(1_000.0);
    config.limits.failure_backoff_max_ms = real_ms(60_000.0);
    config.upstream.timeout_ms = 2_000;
    config.upstream.long_timeout_ms = 2_000;
    config.limits.adaptive = protected;
    if protected {
        config.limits.upstream_per_day = options.per_day;
        config.limits.upstream_per_minute = options.per_minute;
    }
    let proxy = mdproxy_core::app::start_with(
        &config,
        clock.clone(),
        mdproxy_core::upstream::budget::RateClock::following(&clock),
    )
    .await
    .expect("the proxy starts");
    let universe = mdproxy_sim::universe::universe();
    let mut rng = fastrand::Rng::with_seed(options.seed);
    let mut market: Vec<String> = universe.stocks.iter().map(|s| s.code.clone()).collect();
    rng.shuffle(&mut market);
    let run = Arc::new(Run {
        options: options.clone(),
        clock: clock.clone(),
        base: proxy.base_url(),
        client: reqwest::Client::builder()
            .no_proxy()
            .pool_max_idle_per_host(64)
            .timeout(Duration::from_secs(30))
            .build()
            .expect("a client"),
        counts: Counts::default(),
        watch_pool: market[..300].to_vec(),
        market,
    });
    let users: Vec<_> = (0..options.users)
        .map(|user| tokio::spawn(dashboard(run.clone(), user)))
        .collect();
    for user in users {
        user.await.expect("a dashboard never panics");
    }
    let report = &proxy.state().upstream().report()[0];
    let counts = &run.counts;
    let outcome = Outcome {
        name: if protected {
            "protected"
        } else {
            "unprotected"
        },
        upstream: sim.raw_count(),
        bans: sim.bans(),
        throttled: sim.throttled(),
        requests: counts.requests.load(Ordering::Relaxed),
        stale: counts.stale.load(Ordering::Relaxed),
        errors: counts.errors.load(Ordering::Relaxed),
        errors_cached: counts.errors_cached.load(Ordering::Relaxed),
        by_status: lock(&counts.by_status).clone(),
        decreases: report.pace.decreases,
        skipped: report.quota.skipped_today,
    };
    proxy.shutdown().await;
    sim.shutdown().await;
    outcome
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let options = Options::from_env();
    println!(
        "replay of {} {}-{} China time at {}x: {} dashboards, the source tolerates {}/min ({}), \
         upstream_rps {} (default); protected: adaptive rate, per-day quota {}{}",
        NaiveDate::from_ymd_opt(DAY.0, DAY.1, DAY.2).expect("a real date"),
        options.from.format("%H:%M"),
        options.to.format("%H:%M"),
        options.factor,
        options.users,
        options.tolerated,
        if options.ban {
            "warns, then bans for 2 h"
        } else {
            "429 + Retry-After"
        },
        mdproxy_config::LimitsConfig::default().upstream_rps,
        options.per_day,
        if options.per_minute > 0 {
            format!(", per-minute {}", options.per_minute)
        } else {
            String::new()
        },
    );
    let mut outcomes = Vec::new();
    for protected in [true, false] {
        let started = std::time::Instant::now();
        let outcome = run(&options, protected).await;
        eprintln!(
            "{} run: {:.0} s",
            outcome.name,
            started.elapsed().as_secs_f64()
        );
        outcomes.push(outcome);
    }
    println!(
        "{:<12} {:>9} {:>5} {:>10} {:>9} {:>8} {:>8} {:>13} {:>10} {:>8}",
        "run",
        "upstream",
        "bans",
        "throttled",
        "requests",
        "stale",
        "errors",
        "cached-errors",
        "slowdowns",
        "skipped"
    );
    for o in &outcomes {
        println!(
            "{:<12} {:>9} {:>5} {:>10} {:>9} {:>8} {:>8} {:>13} {:>10} {:>8}",
            o.name,
            o.upstream,
            o.bans,
            o.throttled,
            o.requests,
            o.stale,
            o.errors,
            o.errors_cached,
            o.decreases,
            o.skipped
        );
    }
    for o in &outcomes {
        let kinds: Vec<String> = o
            .by_status
            .iter()
            .map(|(k, n)| format!("{k}: {n}"))
            .collect();
        println!(
            "{:<12} errors by kind: {}",
            o.name,
            if kinds.is_empty() {
                "none".into()
            } else {
                kinds.join(", ")
            }
        );
    }
}
