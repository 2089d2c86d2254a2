//! A reload keeps what it must not touch: the client rate buckets, the upstream
//! budget and every counter. Rate limits run on governor's `FakeRelativeClock`, so
//! nothing here sleeps to refill a bucket.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use governor::clock::FakeRelativeClock;
use mdproxy_config::Config;
use mdproxy_core::app::App;
use mdproxy_core::upstream::UpstreamOutcome;
use mdproxy_core::upstream::budget::RateClock;
use mdproxy_market::Clock;
use mdproxy_sim::SimHandle;
use support::header;

/// A simulator and a proxy whose rate limits run on `fake`, with `change` applied
/// to the proxy's config; Saturday evening, so nothing depends on market hours.
async fn start(fake: &FakeRelativeClock, change: impl FnOnce(&mut Config)) -> (SimHandle, App) {
    let clock: Arc<dyn Clock> = support::clock_at("2026-11-21T20:00:00+08:00");
    let sim = mdproxy_sim::start(&support::sim_config(), Arc::clone(&clock))
        .await
        .unwrap();
    let mut config = support::proxy_config(&sim);
    config.admin.listen = "127.0.0.1:0".into();
    change(&mut config);
    let proxy = mdproxy_core::app::start_with(&config, clock, RateClock::Fake(fake.clone()))
        .await
        .unwrap();
    (sim, proxy)
}

async fn get(proxy: &App, target: &str) -> reqwest::Response {
    support::client()
        .get(format!("{}{target}", proxy.base_url()))
        .bearer_auth(support::TOKEN)
        .send()
        .await
        .unwrap()
}

/// An unrelated change (a TTL) reloaded into `proxy`.
fn reload_unrelated(proxy: &App) {
    let mut config = (*proxy.state().snapshot().config).clone();
    config.freshness.negative_secs += 1;
    let restart = proxy.reload(config).unwrap();
    assert!(restart.is_empty(), "{restart:?}");
}

/// Defect: a reload refilled every client bucket, so a client past its limit got a
/// fresh quota. It stays limited until its own bucket refills, and a change of its
/// own limit gives it a new bucket.
#[tokio::test]
async fn a_reload_keeps_a_limited_client_limited() {
    let fake = FakeRelativeClock::default();
    let (_sim, proxy) = start(&fake, |c| {
        c.limits.client_rps = 1;
        c.limits.client_burst = 2;
    })
    .await;
    assert_eq!(get(&proxy, "/market/indices").await.status(), 200);
    assert_eq!(get(&proxy, "/market/indices").await.status(), 200);
    let limited = get(&proxy, "/market/indices").await;
    assert_eq!(limited.status(), 429);
    assert_eq!(header(&limited, "retry-after"), "1");

    reload_unrelated(&proxy);
    assert_eq!(proxy.state().snapshot().generation, 1);
    assert_eq!(
        get(&proxy, "/market/indices").await.status(),
        429,
        "still past its limit after the reload"
    );
    fake.advance(Duration::from_secs(1));
    assert_eq!(get(&proxy, "/market/indices").await.status(), 200);
    assert_eq!(get(&proxy, "/market/indices").await.status(), 429);

    // Its own limit changed: a new bucket.
    let mut config = (*proxy.state().snapshot().config).clone();
    config.limits.client_burst = 3;
    proxy.reload(config).unwrap();
    assert_eq!(get(&proxy, "/market/indices").await.status(), 200);
}

/// Defect: a reload rebuilt the upstream budget (a fresh burst toward the upstream)
/// and reset `mdproxy_upstream_budget_dropped`. The spent budget stays spent, the
/// refusal is counted as the `overloaded` outcome, and counters never go backwards.
#[tokio::test]
async fn a_reload_keeps_the_spent_upstream_budget_and_the_counters() {
    let fake = FakeRelativeClock::default();
    let (sim, proxy) = start(&fake, |c| {
        c.limits.upstream_rps = 1;
        c.limits.upstream_burst = 1;
        c.limits.client_wait_ms = 20;
    })
    .await;
    let upstream = proxy.state().upstream().clone();
    assert_eq!(get(&proxy, "/stock/detail/600519").await.status(), 200);
    let refused = get(&proxy, "/stock/detail/000001").await;
    assert_eq!(refused.status(), 503);
    let (_, code, _) = support::error_of(refused).await;
    assert_eq!(code, "overloaded");
    assert_eq!(
        upstream
            .counters()
            .outcome_count(UpstreamOutcome::Overloaded),
        1
    );

    reload_unrelated(&proxy);
    assert_eq!(
        get(&proxy, "/stock/detail/000002").await.status(),
        503,
        "no fresh burst toward the upstream after a reload"
    );
    assert_eq!(sim.total(), 1, "one upstream request in all");
    assert_eq!(upstream.counters().outcome_count(UpstreamOutcome::Ok), 1);
    assert_eq!(
        upstream
            .counters()
            .outcome_count(UpstreamOutcome::Overloaded),
        2
    );

    // The exposition agrees and counts from the same structure.
    let metrics = support::text(&format!("http://{}/metrics", proxy.admin_addr.unwrap())).await;
    assert!(
        metrics.contains("mdproxy_upstream_requests_total{outcome=\"overloaded\"} 2"),
        "{metrics}"
    );
    assert!(metrics.contains("mdproxy_config_generation 1"), "{metrics}");

    fake.advance(Duration::from_secs(1));
    assert_eq!(get(&proxy, "/stock/detail/000002").await.status(), 200);
}

/// A config file for `sim` that the proxy accepts: upstream, token, and polling
/// every 20 ms.
fn valid_file(sim: &SimHandle) -> String {
    format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nreload_poll_ms = 20\n\n\
         [auth]\ntokens = [\"{}\"]\n\n\
         [upstream]\nbase_url = \"{}\"\ntoken = \"{}\"\nbreaker_failures = 0\n\n\
         [limits]\nupstream_rps = 0\n\n[scheduler]\nenabled = false\n",
        support::TOKEN,
        sim.base_url(),
        support::UPSTREAM_TOKEN
    )
}

/// Defect: an empty or half-written file was applied on reload and every key fell
/// back to its default, so the real tokens stopped working and a built-in
/// `demo-token` started to. Both are refused now; the old config keeps serving.
#[tokio::test]
async fn an_empty_or_truncated_file_is_refused_and_the_old_config_serves() {
    let fake = FakeRelativeClock::default();
    let (sim, proxy) = start(&fake, |c| c.server.reload_poll_ms = 20).await;
    let path = std::env::temp_dir().join(format!(
        "mdproxy-reload-{}-{}.toml",
        std::process::id(),
        fastrand::u64(..)
    ));
    let file = valid_file(&sim);
    std::fs::write(&path, &file).unwrap();
    proxy.watch_config(path.clone(), Arc::new(|_: &str| None));
    let reloads = Arc::clone(proxy.reloads());
    let refused = |n: u64| {
        let reloads = Arc::clone(&reloads);
        move || reloads.refused() >= n
    };
    let cut = file.find("[upstream]").unwrap() + "[upstream]\nbase_u".len();
    for (n, text) in [(1, ""), (2, &file[..cut])] {
        std::fs::write(&path, text).unwrap();
        assert!(
            support::eventually(Duration::from_secs(10), refused(n)).await,
            "file {n} was not refused"
        );
        assert_eq!(get(&proxy, "/market/indices").await.status(), 200);
        let demo = support::client()
            .get(format!("{}/market/indices", proxy.base_url()))
            .bearer_auth("demo-token")
            .send()
            .await
            .unwrap();
        assert_eq!(demo.status(), 401, "no built-in token");
    }
    assert_eq!(
        proxy.state().snapshot().generation,
        0,
        "nothing was applied"
    );
    let _ = std::fs::remove_file(&path);
}

/// Defect (the container pattern: the upstream and the tokens in the environment,
/// the file from a ConfigMap): truncating the file to empty was applied as
/// generation 1, with every key of the file back at its default. An empty file is
/// refused whatever the environment holds; the running config stays.
#[tokio::test]
async fn an_empty_file_is_refused_when_the_environment_holds_the_required_keys() {
    use std::collections::BTreeMap;
    let fake = FakeRelativeClock::default();
    let (sim, proxy) = start(&fake, |c| {
        c.server.reload_poll_ms = 20;
        c.limits.upstream_rps = 0;
    })
    .await;
    let path = std::env::temp_dir().join(format!(
        "mdproxy-reload-env-{}-{}.toml",
        std::process::id(),
        fastrand::u64(..)
    ));
    let file = "[server]\nlisten = \"127.0.0.1:0\"\nreload_poll_ms = 20\n\n\
                [limits]\nupstream_rps = 0\n\n[scheduler]\nenabled = false\n";
    std::fs::write(&path, file).unwrap();
    let env: BTreeMap<String, String> = [
        ("MDPROXY_UPSTREAM_BASE_URL", sim.base_url()),
        ("MDPROXY_UPSTREAM_TOKEN", support::UPSTREAM_TOKEN.to_owned()),
        ("MDPROXY_AUTH_TOKENS", support::TOKEN.to_owned()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    // The file and the environment together are valid: what a reload would apply.
    mdproxy_core::ops::reload::load(&path, &env).unwrap();
    proxy.watch_config(path.clone(), Arc::new(env));
    let reloads = Arc::clone(proxy.reloads());
    std::fs::write(&path, "").unwrap();
    assert!(
        support::eventually(Duration::from_secs(10), || reloads.refused() >= 1).await,
        "the empty file was not refused"
    );
    let snap = proxy.state().snapshot();
    assert_eq!(snap.generation, 0, "nothing was applied");
    assert_eq!(
        snap.config.limits.upstream_rps, 0,
        "not back to its default"
    );
    assert_eq!(get(&proxy, "/market/indices").await.status(), 200);
    let _ = std::fs::remove_file(&path);
}

/// A quote stream of `token` on `proxy`, its first quote read.
async fn open_stream(proxy: &App, token: &str) -> support::SseReader {
    let url = format!(
        "{}/stock/indicator/realtime/sse?codes=600519",
        proxy.base_url()
    );
    let r = support::client()
        .get(url)
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let mut reader = support::SseReader::new(r);
    assert!(reader.next_quote(Duration::from_secs(10)).await.is_some());
    reader
}

/// Whether `reader`'s stream ends (within a bounded number of events).
async fn ends(reader: &mut support::SseReader) -> bool {
    for _ in 0..20 {
        match reader.next_or_end(Duration::from_secs(10)).await {
            support::Next::End | support::Next::Broken(_) => return true,
            support::Next::Timeout => return false,
            support::Next::Event(_) => {}
        }
    }
    false
}

/// `reader`'s stream goes on: an event or silence, not its end.
async fn assert_streams_on(reader: &mut support::SseReader) {
    assert!(matches!(
        reader.next_or_end(Duration::from_millis(200)).await,
        support::Next::Event(_) | support::Next::Timeout
    ));
}

/// Defect: a token removed by a reload kept its open streams. The reload closes
/// them; streams of the tokens that stay are untouched.
#[tokio::test]
async fn a_reload_closes_the_streams_of_revoked_tokens() {
    let fake = FakeRelativeClock::default();
    let (_sim, proxy) = start(&fake, |c| {
        c.auth
            .tokens
            .push(mdproxy_config::Secret::new("soon-revoked"));
    })
    .await;
    let mut kept = open_stream(&proxy, support::TOKEN).await;
    let mut revoked = open_stream(&proxy, "soon-revoked").await;
    let mut config = (*proxy.state().snapshot().config).clone();
    config.auth.tokens.retain(|t| t.expose() != "soon-revoked");
    proxy.reload(config).unwrap();
    assert!(
        ends(&mut revoked).await,
        "the revoked token's stream is closed"
    );
    assert_streams_on(&mut kept).await;
}

/// Defect: the hub filed streams by the token's place in the list, which a reload
/// that removes an earlier token changes. Revoking a token after such a reload
/// closed the streams filed under its new place (none, or another token's), not
/// its own. Streams are filed by the token's identity now.
#[tokio::test]
async fn a_token_revoked_after_its_place_moved_has_its_streams_closed() {
    let fake = FakeRelativeClock::default();
    let (_sim, proxy) = start(&fake, |c| {
        for token in ["first-gone", "then-revoked"] {
            c.auth.tokens.push(mdproxy_config::Secret::new(token));
        }
    })
    .await;
    let mut kept = open_stream(&proxy, support::TOKEN).await;
    let mut revoked = open_stream(&proxy, "then-revoked").await;
    for gone in ["first-gone", "then-revoked"] {
        let mut config = (*proxy.state().snapshot().config).clone();
        config.auth.tokens.retain(|t| t.expose() != gone);
        proxy.reload(config).unwrap();
    }
    assert!(
        ends(&mut revoked).await,
        "the revoked token's stream is closed"
    );
    assert_streams_on(&mut kept).await;
}

/// A refused reload names every problem of the file and the environment at once (the
/// "configuration refused" log line carries this text), and a misspelt `MDPROXY_*`
/// variable refuses a file that is otherwise valid.
#[test]
fn a_refused_reload_names_every_problem() {
    use mdproxy_core::ops::reload::{Applied, Apply, Lookup};
    use std::collections::BTreeMap;
    use std::sync::atomic::{AtomicBool, Ordering};
    let path = std::env::temp_dir().join(format!(
        "mdproxy-reload-report-{}-{}.toml",
        std::process::id(),
        fastrand::u64(..)
    ));
    let applied = Arc::new(AtomicBool::new(false));
    let seen = Arc::clone(&applied);
    let apply: Apply = Arc::new(move |_| {
        seen.store(true, Ordering::SeqCst);
        Ok(Applied {
            generation: 1,
            needs_restart: Vec::new(),
        })
    });
    let env = |pairs: &[(&str, &str)]| -> Lookup {
        Arc::new(
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect::<BTreeMap<String, String>>(),
        )
    };
    // The upstream's key comes from the environment, as in production.
    let misspelt = env(&[
        ("MDPROXY_UPSTREAM_TIMEOUTMS", "5"),
        ("MDPROXY_UPSTREAM_TOKEN", "upstream-key"),
    ]);
    let valid =
        "[auth]\ntokens = [\"t\"]\n[upstream]\nbase_url = \"https://api.example.com/api/v1\"\n";
    std::fs::write(
        &path,
        format!("{valid}timeout_ms = \"soon\"\n[server]\nlistn = \"127.0.0.1:1\"\n[[scheduler.jobs]]\nname = \"j\"\ncron = \"often\"\ntargets = []\n"),
    )
    .unwrap();
    let err = mdproxy_core::ops::reload::reload(&path, &misspelt, &apply)
        .unwrap_err()
        .to_string();
    let file = path.display().to_string();
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 5, "{err}");
    assert_eq!(
        lines[0],
        format!("{file}:5: upstream.timeout_ms: expected an integer, found a string \"soon\"")
    );
    assert_eq!(
        lines[1],
        format!("{file}:7: server.listn: unknown key (did you mean server.listen?)")
    );
    assert!(
        lines[2].starts_with(&format!("{file}:10: scheduler.jobs[0].cron: ")),
        "{err}"
    );
    assert_eq!(
        lines[3],
        "MDPROXY_UPSTREAM_TIMEOUTMS: unknown variable (did you mean MDPROXY_UPSTREAM_TIMEOUT_MS?)"
    );
    assert_eq!(lines[4], "4 problems");

    std::fs::write(&path, valid).unwrap();
    let err = mdproxy_core::ops::reload::reload(&path, &misspelt, &apply)
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("MDPROXY_UPSTREAM_TIMEOUTMS: unknown variable"),
        "{err}"
    );
    assert!(
        !applied.load(Ordering::SeqCst),
        "nothing refused was applied"
    );
    let fixed = env(&[
        ("MDPROXY_UPSTREAM_TIMEOUT_MS", "5"),
        ("MDPROXY_UPSTREAM_TOKEN", "upstream-key"),
    ]);
    mdproxy_core::ops::reload::reload(&path, &fixed, &apply).unwrap();
    assert!(applied.load(Ordering::SeqCst));
    let _ = std::fs::remove_file(&path);
}

/// Defect: a reload changing the keys read once at start (the config's poll, the
/// listener's drain, the log's format) reported nothing to restart, and a changed
/// grace applied to half of a stop (the background work's) while the listener
/// drained with the old one. They are named as restart-only, and a stop keeps
/// the grace it started with.
#[tokio::test]
async fn keys_read_at_start_are_named_and_the_grace_stays() {
    let fake = FakeRelativeClock::default();
    let (_sim, proxy) = start(&fake, |_| {}).await;
    let grace = proxy.grace();
    let mut config = (*proxy.state().snapshot().config).clone();
    config.server.shutdown_grace_ms += 1_000;
    config.server.reload_poll_ms += 1;
    let restart = proxy.reload(config).unwrap();
    assert_eq!(
        restart,
        ["server.reload_poll_ms", "server.shutdown_grace_ms"],
        "{restart:?}"
    );
    assert_eq!(proxy.grace(), grace, "the grace of the start");
    proxy.shutdown().await;
}
