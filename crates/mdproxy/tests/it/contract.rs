//! Contract tests at the edges of the freshness windows and of HTTP: a reload that
//! moves cached lifetimes, the end of stale-if-error, negative-entry expiry, and the
//! conditional / HEAD / CORS matrix read off the wire. Time is a `ManualClock` set to
//! fixed instants outside the A-share session, so every TTL here is the closed one.

use crate::support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use mdproxy_api::catalog::FreshnessClass;
use mdproxy_config::{Config, NegativeKeep, TtlOverride};
use mdproxy_market::ManualClock;
use support::{Env, RawResponse, error_of, eventually, header};

/// Saturday 21 November 2026, 20:00 China time: closed all day, so a `news` answer
/// is fresh for 300 s, stale for 600 s more, and usable on error until 3600 s past
/// its fresh time (the defaults of docs/freshness.md).
const SATURDAY_20_00: &str = "2026-11-21T20:00:00+08:00";
/// A `news`-class target (never held until the open).
const NEWS: &str = "/news/overview";
/// Out of session defaults of the `news` class.
const NEWS_CLOSED_FRESH: i64 = 300;
const NEWS_ERROR: i64 = 3600;
/// A large `intraday` answer (well over 1 KiB, so it has a gzip representation).
const KLINE: &str = "/stock/kline?code=000001&period=week";

/// `clock`'s start moved by `secs`.
fn at(start: DateTime<Utc>, secs: i64) -> DateTime<Utc> {
    start + chrono::Duration::seconds(secs)
}

/// A proxy and simulator on a clock standing at Saturday 20:00.
async fn saturday_env(proxy: impl FnOnce(&mut Config)) -> (Env, Arc<ManualClock>, DateTime<Utc>) {
    let clock = support::clock_at(SATURDAY_20_00);
    let start = mdproxy_market::Clock::now(&*clock);
    let env = support::start_with(|_| {}, proxy, Some(clock.clone())).await;
    (env, clock, start)
}

/// The running config with `change` applied, applied as a reload.
fn reload(env: &Env, change: impl FnOnce(&mut Config)) {
    let mut config = (*env.proxy.state().snapshot().config).clone();
    change(&mut config);
    config.validate().expect("the test's config is valid");
    let restart = env.proxy.reload(config).unwrap();
    assert!(
        restart.is_empty(),
        "nothing here needs a restart: {restart:?}"
    );
}

// ---------------------------------------------------------------------------------
// 1. Reload recomputes the lifetimes of cached answers.
// ---------------------------------------------------------------------------------

/// A reload that shortens a class's fresh time turns a cached answer STALE at once:
/// it is served without waiting on the upstream while exactly one background request
/// refreshes it under the new policy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_shortening_fresh_time_serves_cached_answer_stale_while_revalidating() {
    // A long upstream timeout: the held refresh below must not time out on its own.
    let (env, clock, start) = saturday_env(|c| c.upstream.timeout_ms = 60_000).await;
    let first = env.get(NEWS).await;
    assert_eq!(header(&first, "x-cache"), "MISS");
    let body = first.bytes().await.unwrap();
    clock.set(at(start, 100));
    let hit = env.get(NEWS).await;
    assert_eq!(header(&hit, "x-cache"), "HIT");
    assert_eq!(header(&hit, "cache-status"), "mdproxy; hit; ttl=200");
    assert_eq!(env.sim.hits(NEWS), 1);

    // Out of session news is now fresh for 60 s: the entry fetched 100 s ago is 40 s
    // past fresh, inside its (600 s) stale window.
    reload(&env, |c| {
        c.freshness
            .classes
            .get_mut(&FreshnessClass::News)
            .unwrap()
            .closed_fresh_secs = 60;
    });
    // Any upstream request now hangs until released. Had the proxy asked the
    // upstream for this request, it could only have answered after the upstream
    // timed out, and then as stale-if-error: `stale-while-revalidate` proves it
    // answered from the cache without waiting.
    env.sim.set_hang(true);
    let stale = env.get(NEWS).await;
    assert_eq!(stale.status(), 200);
    assert_eq!(header(&stale, "x-cache"), "STALE");
    assert_eq!(
        header(&stale, "cache-status"),
        "mdproxy; hit; ttl=-40; detail=stale-while-revalidate"
    );
    assert_eq!(header(&stale, "cache-control"), "max-age=0");
    assert_eq!(header(&stale, "age"), "100");
    assert_eq!(stale.bytes().await.unwrap(), body);

    // The one background refresh reaches the upstream (and hangs there) ...
    assert!(eventually(Duration::from_secs(10), || env.sim.hits(NEWS) == 2).await);
    // ... and a second stale request neither waits (it is answered while the upstream
    // hangs) nor starts another one (counted when decided: a second refresh would
    // join the first's single flight, so the upstream alone could not tell).
    let cache = env.proxy.state().cache();
    assert_eq!(cache.refreshes(), 1);
    let again = env.get(NEWS).await;
    assert_eq!(header(&again, "x-cache"), "STALE");
    assert!(header(&again, "cache-status").ends_with("detail=stale-while-revalidate"));
    assert_eq!(cache.refreshes(), 1, "a second refresh was started");
    let key = mdproxy_api::parse_target(NEWS).unwrap().target;
    assert!(
        cache.store().is_filling(&key),
        "the one refresh still waits"
    );
    assert_eq!(env.sim.hits(NEWS), 2);

    // Released, the refresh lands under the new policy: fresh for 60 s from now.
    env.sim.set_hang(false);
    let mut refreshed = None;
    for _ in 0..250 {
        let r = env.get(NEWS).await;
        if header(&r, "x-cache") == "HIT" {
            refreshed = Some(r);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let refreshed = refreshed.expect("the background refresh lands");
    assert_eq!(header(&refreshed, "age"), "0");
    assert_eq!(header(&refreshed, "cache-control"), "max-age=60");
    assert_eq!(env.sim.hits(NEWS), 2, "no request beyond the one refresh");
}

/// A reload that lengthens an endpoint's fresh time (a per-endpoint override) makes
/// an answer that had gone stale a fresh HIT again, without asking the upstream.
#[tokio::test]
async fn reload_lengthening_fresh_time_makes_a_stale_answer_fresh_again() {
    let (env, clock, start) = saturday_env(|_| {}).await;
    assert_eq!(header(&env.get(NEWS).await, "x-cache"), "MISS");
    // 400 s later the answer is past its 300 s; no request is made meanwhile (one
    // would start a refresh).
    clock.set(at(start, 400));
    reload(&env, |c| {
        c.freshness.endpoints.insert(
            NEWS.into(),
            TtlOverride {
                closed_fresh_secs: Some(3600),
                ..TtlOverride::default()
            },
        );
    });
    let r = env.get(NEWS).await;
    assert_eq!(header(&r, "x-cache"), "HIT");
    assert_eq!(header(&r, "cache-status"), "mdproxy; hit; ttl=3200");
    assert_eq!(header(&r, "cache-control"), "max-age=3200");
    assert_eq!(header(&r, "age"), "400");
    assert_eq!(env.sim.hits(NEWS), 1);
}

// ---------------------------------------------------------------------------------
// 2. The end of stale-if-error, and negative entries.
// ---------------------------------------------------------------------------------

/// With a failing upstream a cached answer is served (stale-if-error) until one
/// second before its `error_until`; one second after, the client gets 502 in the
/// JSON envelope.
#[tokio::test]
async fn failing_upstream_is_hidden_until_error_until_then_502() {
    // Every request asks the upstream again here (no key held back after a failure:
    // tests/protection.rs covers that).
    let (env, clock, start) = saturday_env(|c| c.limits.failure_backoff_ms = 0).await;
    let body = env.get(NEWS).await.bytes().await.unwrap();
    let error_until = NEWS_CLOSED_FRESH + NEWS_ERROR;
    env.sim.set_error_rate(1.0);

    clock.set(at(start, error_until - 1));
    let r = env.get(NEWS).await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "x-cache"), "STALE");
    assert_eq!(
        header(&r, "cache-status"),
        format!(
            "mdproxy; hit; ttl=-{}; detail=stale-if-error",
            NEWS_ERROR - 1
        )
    );
    assert_eq!(header(&r, "cache-control"), "max-age=0");
    assert_eq!(header(&r, "age"), (error_until - 1).to_string());
    assert_eq!(r.bytes().await.unwrap(), body);
    assert_eq!(env.sim.hits(NEWS), 2, "the upstream was asked first");

    clock.set(at(start, error_until + 1));
    let r = env.get(NEWS).await;
    assert_eq!(header(&r, "cache-control"), "no-store");
    let (status, code, _) = error_of(r).await;
    assert_eq!((status, code.as_str()), (502, "upstream_error"));
    assert_eq!(env.sim.hits(NEWS), 3);
}

/// With a hanging upstream the same window ends in 504: stale-if-error one second
/// before `error_until`, `upstream_timeout` one second after.
#[tokio::test]
async fn hanging_upstream_is_hidden_until_error_until_then_504() {
    let (env, clock, start) = saturday_env(|_| {}).await;
    let first = env.get(NEWS).await;
    assert_eq!(first.status(), 200);
    let body = first.bytes().await.unwrap();
    // Short only now: on a loaded machine the first fill may take longer than this.
    reload(&env, |c| c.upstream.timeout_ms = 300);
    let error_until = NEWS_CLOSED_FRESH + NEWS_ERROR;
    env.sim.set_hang(true);

    clock.set(at(start, error_until - 1));
    let r = env.get(NEWS).await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "x-cache"), "STALE");
    assert!(header(&r, "cache-status").ends_with("; detail=stale-if-error"));
    assert_eq!(r.bytes().await.unwrap(), body);

    clock.set(at(start, error_until + 1));
    let (status, code, _) = error_of(env.get(NEWS).await).await;
    assert_eq!((status, code.as_str()), (504, "upstream_timeout"));
    env.sim.set_hang(false);
}

/// An upstream 404 (unknown code) is cached for `freshness.negative_secs`: HITs
/// without the upstream until then; afterwards the upstream is asked again, and an
/// expired negative entry is never served in place of an upstream failure.
#[tokio::test]
async fn unknown_code_is_cached_until_negative_secs_then_asked_again() {
    let (env, clock, start) = saturday_env(|c| {
        c.freshness.negative_secs = 12;
        c.limits.failure_backoff_ms = 0;
    })
    .await;
    let unknown = "/stock/detail/605999";
    let key = "/stock/detail/605999";
    let first = env.get(unknown).await;
    assert_eq!(first.status(), 404);
    assert_eq!(header(&first, "x-cache"), "MISS");
    let body = first.bytes().await.unwrap();
    assert_eq!(env.sim.hits_for(key), 1);

    clock.set(at(start, 11));
    let cached = env.get(unknown).await;
    assert_eq!(cached.status(), 404);
    assert_eq!(header(&cached, "x-cache"), "HIT");
    assert_eq!(
        header(&cached, "cache-status"),
        "mdproxy; hit; ttl=1; detail=negative"
    );
    assert_eq!(cached.bytes().await.unwrap(), body);
    assert_eq!(env.sim.hits_for(key), 1, "answered from the negative entry");

    clock.set(at(start, 13));
    env.sim.fail_next(1);
    let (status, code, _) = error_of(env.get(unknown).await).await;
    assert_eq!(
        (status, code.as_str()),
        (502, "upstream_error"),
        "a negative entry is never served stale"
    );
    assert_eq!(env.sim.hits_for(key), 2);
    let asked = env.get(unknown).await;
    assert_eq!(asked.status(), 404);
    assert_eq!(header(&asked, "x-cache"), "MISS");
    assert_eq!(env.sim.hits_for(key), 3);
}

/// Under `freshness.negative_keep = "second_ask"` an unknown code's first 404 is
/// relayed and not kept (`Cache-Status` without `stored`), its second is kept, and
/// the third is a negative hit; the setting applies on reload, and a found answer
/// is kept at its first ask all along.
#[tokio::test]
async fn unknown_code_is_kept_from_its_second_ask_under_second_ask() {
    let (env, _clock, _start) = saturday_env(|c| {
        c.freshness.negative_keep = NegativeKeep::SecondAsk;
    })
    .await;
    let unknown = "/stock/detail/605998";
    let statuses = |r: &reqwest::Response| {
        (
            r.status().as_u16(),
            header(r, "x-cache"),
            header(r, "cache-status"),
        )
    };
    let first = env.get(unknown).await;
    assert_eq!(
        statuses(&first),
        (404, "MISS".into(), "mdproxy; fwd=miss".into())
    );
    let body = first.bytes().await.unwrap();
    let second = env.get(unknown).await;
    assert_eq!(
        statuses(&second),
        (404, "MISS".into(), "mdproxy; fwd=miss; stored".into())
    );
    assert_eq!(second.bytes().await.unwrap(), body);
    let third = env.get(unknown).await;
    assert_eq!(
        (third.status().as_u16(), header(&third, "x-cache")),
        (404, "HIT".into())
    );
    assert!(header(&third, "cache-status").ends_with("detail=negative"));
    assert_eq!(env.sim.hits_for(unknown), 2, "asked twice, then kept");
    let store = env.proxy.state().cache().store().clone();
    assert_eq!(store.negatives_relayed(), 1, "the first ask, counted");

    let found = env.get(NEWS).await;
    assert_eq!(header(&found, "cache-status"), "mdproxy; fwd=miss; stored");

    // Back to `first_ask` on reload: the next unknown code is kept at once.
    reload(&env, |c| c.freshness.negative_keep = NegativeKeep::FirstAsk);
    let other = "/stock/detail/605997";
    let kept = env.get(other).await;
    assert_eq!(header(&kept, "cache-status"), "mdproxy; fwd=miss; stored");
    assert_eq!(header(&env.get(other).await, "x-cache"), "HIT");
    assert_eq!(env.sim.hits_for(other), 1);
    assert_eq!(store.negatives_relayed(), 1, "a 404 kept is not counted");
}

// ---------------------------------------------------------------------------------
// 4. Conditional requests, HEAD and CORS, read off the wire.
// ---------------------------------------------------------------------------------

/// Sends one HTTP/1.1 request to `/api/v1{target}` (`Connection: close`) and reads
/// the whole answer; `headers` are written as given, so one name may appear on
/// several lines.
async fn raw(
    addr: SocketAddr,
    method: &str,
    target: &str,
    headers: &[(&str, &str)],
) -> RawResponse {
    support::raw_request(addr, method, &format!("/api/v1{target}"), headers).await
}

/// The bearer header every raw request carries (`support::TOKEN`).
const AUTH: (&str, &str) = ("Authorization", "Bearer test-token");

/// `If-None-Match` with the exact ETag, a weak `W/` form of it, a list holding it,
/// and `*` each get 304 with ETag, Cache-Control and X-Cache but no body; a tag that
/// matches nothing gets the 200 with the body.
#[tokio::test]
async fn if_none_match_variants_get_304_without_a_body() {
    assert_eq!(AUTH.1, format!("Bearer {}", support::TOKEN));
    let (env, _clock, _start) = saturday_env(|_| {}).await;
    let full = raw(env.proxy.addr, "GET", KLINE, &[AUTH]).await;
    assert_eq!(full.status, 200);
    let etag = full.one("etag").unwrap().to_owned();
    assert!(etag.starts_with('"') && etag.ends_with('"'), "{etag}");
    let cache_control = full.one("cache-control").unwrap().to_owned();

    let weak = format!("W/{etag}");
    let list = format!("\"0000000000000000\", {etag}, \"ffff\"");
    for tag in [etag.as_str(), weak.as_str(), list.as_str(), "*"] {
        let r = raw(
            env.proxy.addr,
            "GET",
            KLINE,
            &[AUTH, ("If-None-Match", tag)],
        )
        .await;
        assert_eq!(r.status, 304, "{tag}");
        assert_eq!(r.one("etag"), Some(etag.as_str()), "{tag}");
        assert_eq!(
            r.one("cache-control"),
            Some(cache_control.as_str()),
            "{tag}"
        );
        assert_eq!(r.one("x-cache"), Some("HIT"), "{tag}");
        assert!(
            matches!(r.one("content-length"), None | Some("0")),
            "{tag}: {:?}",
            r.one("content-length")
        );
        assert!(r.body.is_empty(), "{tag}: {} body bytes", r.body.len());
    }

    let other = raw(
        env.proxy.addr,
        "GET",
        KLINE,
        &[AUTH, ("If-None-Match", "\"0000000000000000\"")],
    )
    .await;
    assert_eq!(other.status, 200);
    assert_eq!(other.body, full.body);
    assert_eq!(env.sim.hits("/stock/kline"), 1);
}

/// `If-None-Match` names a representation: the gzip ETag (`-gz`) does not match the
/// identity body a client without `Accept-Encoding: gzip` gets, and the identity ETag
/// does not match the gzip body.
#[tokio::test]
async fn gzip_etag_does_not_validate_the_identity_representation() {
    let (env, _clock, _start) = saturday_env(|_| {}).await;
    let plain = raw(env.proxy.addr, "GET", KLINE, &[AUTH]).await;
    let plain_etag = plain.one("etag").unwrap().to_owned();
    // Filled for a client that asked for nothing: gzip is made at the first
    // request for it, and served once made.
    let gz = support::once_coded("gzip", || async {
        let r = raw(
            env.proxy.addr,
            "GET",
            KLINE,
            &[AUTH, ("Accept-Encoding", "gzip")],
        )
        .await;
        (r.one("content-encoding").unwrap_or_default().to_owned(), r)
    })
    .await;
    let gz_etag = gz.one("etag").unwrap().to_owned();
    assert_eq!(
        gz_etag,
        format!("{}-gz\"", plain_etag.trim_end_matches('"'))
    );

    let r = raw(
        env.proxy.addr,
        "GET",
        KLINE,
        &[AUTH, ("If-None-Match", &gz_etag)],
    )
    .await;
    assert_eq!(
        r.status, 200,
        "the gzip tag does not validate the identity body"
    );
    assert_eq!(r.one("etag"), Some(plain_etag.as_str()));
    assert_eq!(r.one("content-encoding"), None);
    assert_eq!(r.body, plain.body);

    let r = raw(
        env.proxy.addr,
        "GET",
        KLINE,
        &[
            AUTH,
            ("Accept-Encoding", "gzip"),
            ("If-None-Match", &plain_etag),
        ],
    )
    .await;
    assert_eq!(
        r.status, 200,
        "the identity tag does not validate the gzip body"
    );
    assert_eq!(r.one("etag"), Some(gz_etag.as_str()));
    assert_eq!(r.body, gz.body);
}

/// `If-None-Match` may arrive as several header lines (RFC 9110 §5.3: one list); a
/// matching tag on the second line still gets 304.
#[tokio::test]
async fn if_none_match_split_over_two_lines_gets_304() {
    let (env, _clock, _start) = saturday_env(|_| {}).await;
    let full = raw(env.proxy.addr, "GET", KLINE, &[AUTH]).await;
    let etag = full.one("etag").unwrap().to_owned();
    let r = raw(
        env.proxy.addr,
        "GET",
        KLINE,
        &[
            AUTH,
            ("If-None-Match", "\"0000000000000000\""),
            ("If-None-Match", &etag),
        ],
    )
    .await;
    assert_eq!(r.status, 304);
    assert!(r.body.is_empty());
}

/// HEAD on a cold key answers exactly what GET on a cold key answers (status,
/// X-Cache, Cache-Status, ETag, Content-Type, Cache-Control, Age, Vary,
/// Content-Length) with no body, and fills the cache like GET.
#[tokio::test]
async fn head_on_a_cold_key_matches_get_without_a_body() {
    // Two proxies, each with its own simulator, on one clock: the same cold key gives
    // the same answer, so the two cold responses can be compared header by header.
    let clock = support::clock_at(SATURDAY_20_00);
    let head_env = support::start_with(|_| {}, |_| {}, Some(clock.clone())).await;
    let get_env = support::start_with(|_| {}, |_| {}, Some(clock.clone())).await;
    let target = "/stock/detail/600519";
    let head = raw(head_env.proxy.addr, "HEAD", target, &[AUTH]).await;
    let get = raw(get_env.proxy.addr, "GET", target, &[AUTH]).await;
    assert_eq!(get.status, 200);
    assert_eq!(head.status, get.status);
    assert_eq!(get.one("x-cache"), Some("MISS"));
    for name in [
        "x-cache",
        "cache-status",
        "etag",
        "content-type",
        "cache-control",
        "age",
        "content-length",
    ] {
        assert!(get.one(name).is_some(), "GET has {name}");
        assert_eq!(head.one(name), get.one(name), "{name}");
    }
    assert_eq!(head.all("vary"), get.all("vary"));
    assert_eq!(
        get.one("content-length").unwrap(),
        get.body.len().to_string()
    );
    assert!(head.body.is_empty(), "{} body bytes", head.body.len());
    assert_eq!(head_env.sim.hits_for("/stock/detail/600519"), 1);

    // The HEAD filled the cache: a GET now is a HIT with the same validator.
    let after = raw(head_env.proxy.addr, "GET", target, &[AUTH]).await;
    assert_eq!(after.one("x-cache"), Some("HIT"));
    assert_eq!(after.one("etag"), get.one("etag"));
    assert_eq!(after.body, get.body);
    assert_eq!(head_env.sim.hits_for("/stock/detail/600519"), 1);
}

/// With `server.cors_origins` set, a preflight from an unlisted origin gets no
/// `Access-Control-Allow-*` headers, and every answer (preflight, GET from an
/// unlisted origin, GET with no origin) says `Vary: Origin` beside `Accept-Encoding`.
#[tokio::test]
async fn denied_cors_preflight_gets_no_allow_origin_and_varies_on_origin() {
    let (env, _clock, _start) =
        saturday_env(|c| c.server.cors_origins = vec!["https://dash.example.com".into()]).await;
    let pre = raw(
        env.proxy.addr,
        "OPTIONS",
        NEWS,
        &[
            ("Origin", "https://evil.example"),
            ("Access-Control-Request-Method", "GET"),
            ("Access-Control-Request-Headers", "authorization"),
        ],
    )
    .await;
    assert_eq!(pre.status, 204);
    assert_eq!(pre.one("access-control-allow-origin"), None);
    assert_eq!(pre.one("access-control-allow-methods"), None);
    assert_eq!(pre.one("access-control-allow-headers"), None);
    assert!(pre.varies_on("origin"), "{:?}", pre.all("vary"));
    assert!(pre.body.is_empty());

    let get = raw(
        env.proxy.addr,
        "GET",
        NEWS,
        &[AUTH, ("Origin", "https://evil.example")],
    )
    .await;
    assert_eq!(get.status, 200);
    assert_eq!(get.one("access-control-allow-origin"), None);
    assert_eq!(get.one("access-control-expose-headers"), None);
    assert!(get.varies_on("origin"), "{:?}", get.all("vary"));
    assert!(get.varies_on("accept-encoding"), "{:?}", get.all("vary"));

    let no_origin = raw(env.proxy.addr, "GET", NEWS, &[AUTH]).await;
    assert!(no_origin.varies_on("origin"), "{:?}", no_origin.all("vary"));
    assert!(no_origin.varies_on("accept-encoding"));
    assert_eq!(
        env.sim.hits(NEWS),
        1,
        "a preflight never reaches the upstream"
    );
}

/// A preflight from a listed origin gets 204 with the origin, the allowed methods
/// and headers, `Vary: Origin`, and no body, without a token.
#[tokio::test]
async fn allowed_cors_preflight_gets_204_with_allow_methods() {
    let (env, _clock, _start) =
        saturday_env(|c| c.server.cors_origins = vec!["https://dash.example.com".into()]).await;
    let pre = raw(
        env.proxy.addr,
        "OPTIONS",
        NEWS,
        &[
            ("Origin", "https://dash.example.com"),
            ("Access-Control-Request-Method", "GET"),
            (
                "Access-Control-Request-Headers",
                "authorization, if-none-match",
            ),
        ],
    )
    .await;
    assert_eq!(pre.status, 204);
    assert_eq!(
        pre.one("access-control-allow-origin"),
        Some("https://dash.example.com")
    );
    let methods = pre.one("access-control-allow-methods").unwrap();
    assert!(
        methods.contains("GET") && methods.contains("HEAD"),
        "{methods}"
    );
    let allowed = pre.one("access-control-allow-headers").unwrap();
    // Each way a key is sent in a header (the upstream's clients send `x-api-key`).
    assert!(
        allowed.contains("Authorization")
            && allowed.contains("X-Api-Key")
            && allowed.contains("If-None-Match"),
        "{allowed}"
    );
    assert!(pre.varies_on("origin"), "{:?}", pre.all("vary"));
    assert!(pre.body.is_empty());
    assert_eq!(env.sim.total(), 0);
}
