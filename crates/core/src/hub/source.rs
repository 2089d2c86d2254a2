//! Where quotes come from: the [`QuoteSource`] the poll loop asks (a script in
//! tests), and the one production uses, [`UpstreamSource`]: `hub.source` in batches
//! of `hub.batch_size` through the upstream's client, budget, pause and quotas, its
//! rows keyed by canonical code, and the spacing of polls the upstream's state
//! allows (`allowance`).

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::BoxFuture;

use crate::state::AppState;
use crate::upstream::budget::Priority;
use crate::upstream::client::FetchError;
use crate::upstream::target::TargetReport;

/// What the poll loop asks for quotes.
pub trait QuoteSource: Send + Sync {
    /// One poll of `codes` (canonical): their rows by canonical code, and how it
    /// went.
    fn poll<'a>(&'a self, codes: &'a [&'a str]) -> BoxFuture<'a, Polled>;

    /// How far apart polls of `codes` codes must be now, at least, when the hub's
    /// own interval is `interval`: zero while nothing holds the poll back.
    fn allowance(&self, codes: usize, interval: Duration) -> Allowance;
}

/// What one poll brought.
#[derive(Debug, Default)]
pub struct Polled {
    /// Rows by canonical code, each one line of JSON.
    pub rows: HashMap<String, Bytes>,
    /// Requests the poll was made of.
    pub requests: usize,
    /// Those that reached the upstream (not refused by the budget, a pause or a
    /// quota): the hub counts them as its polls.
    pub asked: usize,
    /// Those that failed, and the label of the first failure.
    pub failed: usize,
    pub error: Option<&'static str>,
    /// The upstream is not to be asked for this long (a pause, a spent quota).
    pub hold: Option<Duration>,
}

/// How far apart the upstream's state allows polls to be.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Allowance {
    /// The shortest spacing of polls now (zero: the hub's interval decides).
    pub spacing: Duration,
    /// What sets it: `paused`, `pace`, `minute_quota` or `day_quota`.
    pub reason: Option<&'static str>,
}

/// The share of a quota the quote poll may spend: half of a minute's, and half of
/// what is left of the day spread over the rest of it. The rest is for client
/// misses, which the poll must not starve however many codes it carries.
const QUOTA_SHARE: (u32, u32) = (1, 2);

/// The spacing of polls of `requests` upstream requests that `targets` (in the
/// order they are tried) allow, the hub's own interval being `interval`:
/// - all paused by `Retry-After`: until the first pause ends;
/// - the adaptive pace below its ceiling: the interval stretched by as much as the
///   rate went down (the poll keeps its share of a smaller budget);
/// - a minute quota: at most half of it per minute; a day quota: at most half of
///   what is left, spread over the rest of the day (until the next day when spent).
///
/// The target that takes the poll is the first one not paused whose breaker is
/// closed (else the first not paused).
pub fn allowance(targets: &[TargetReport], requests: usize, interval: Duration) -> Allowance {
    let open = |t: &&TargetReport| t.paused_for.is_none();
    let Some(target) = targets
        .iter()
        .filter(open)
        .find(|t| !t.breaker_open)
        .or_else(|| targets.iter().find(|t| t.paused_for.is_none()))
    else {
        let spacing = targets.iter().filter_map(|t| t.paused_for).min();
        return Allowance {
            spacing: spacing.unwrap_or_default(),
            reason: spacing.map(|_| "paused"),
        };
    };
    let requests = u32::try_from(requests.max(1)).unwrap_or(u32::MAX);
    let (part, whole) = QUOTA_SHARE;
    let mut held = Allowance::default();
    let mut hold = |spacing: Duration, reason: &'static str| {
        if spacing > held.spacing {
            held = Allowance {
                spacing,
                reason: Some(reason),
            };
        }
    };
    let pace = &target.pace;
    if pace.ceiling > 0.0 && pace.rate > 0.0 && pace.rate < pace.ceiling {
        hold(interval.mul_f64(pace.ceiling / pace.rate), "pace");
    }
    let quota = &target.quota;
    if quota.per_minute > 0 {
        let per_minute = u32::try_from(quota.per_minute).unwrap_or(u32::MAX);
        let share = (per_minute / whole * part).max(1);
        hold(Duration::from_secs(60) * requests / share, "minute_quota");
    }
    if quota.per_day > 0 {
        let left = quota.per_day.saturating_sub(quota.today);
        let spacing = if left == 0 {
            quota.day_resets_in
        } else {
            let share = u32::try_from((left / u64::from(whole) * u64::from(part)).max(1))
                .unwrap_or(u32::MAX);
            quota.day_resets_in * requests / share
        };
        hold(spacing, "day_quota");
    }
    held
}

/// The upstream as the hub's source.
pub struct UpstreamSource {
    state: AppState,
}

impl UpstreamSource {
    /// Polls through `state`'s upstream, as `state`'s `[hub]` says.
    pub fn new(state: AppState) -> UpstreamSource {
        UpstreamSource { state }
    }
}

impl QuoteSource for UpstreamSource {
    fn poll<'a>(&'a self, codes: &'a [&'a str]) -> BoxFuture<'a, Polled> {
        Box::pin(async move {
            let state = &self.state;
            let snap = state.snapshot();
            let config = &snap.config.hub;
            // Every batch of the union, concurrently, through the upstream client
            // and budget.
            let batches = codes.chunks(config.batch_size.max(1)).map(|batch| {
                let target = format!("{}?codes={}", config.source, batch.join(","));
                async move { state.upstream().fetch(&target, Priority::Client).await }
            });
            let results = futures_util::future::join_all(batches).await;
            let mut polled = Polled {
                requests: results.len(),
                ..Polled::default()
            };
            for result in results {
                let asked = !matches!(
                    result,
                    Err(FetchError::Overloaded
                        | FetchError::Dropped
                        | FetchError::Paused { .. }
                        | FetchError::OverQuota { .. })
                );
                polled.asked += usize::from(asked);
                match result {
                    Ok(fetched) => polled.rows.extend(parse_items(&fetched.body)),
                    Err(e) => {
                        polled.failed += 1;
                        polled.error.get_or_insert(e.as_str());
                        let hold = match e {
                            FetchError::Paused { remaining } => remaining,
                            FetchError::OverQuota { resets_in } => resets_in,
                            _ => continue,
                        };
                        polled.hold = polled.hold.max(Some(hold));
                    }
                }
            }
            polled
        })
    }

    fn allowance(&self, codes: usize, interval: Duration) -> Allowance {
        let batch = self.state.snapshot().config.hub.batch_size.max(1);
        allowance(
            &self.state.upstream().report(),
            codes.div_ceil(batch),
            interval,
        )
    }
}

/// Extracts the quote rows of a poll answer, keyed by canonical code: `data.diff[*]`
/// (the upstream's push2 lists), else `data.list[*]`, else a bare `data` array. Each
/// row is kept as the upstream sent it, re-serialised as one line of JSON.
fn parse_items(body: &[u8]) -> Vec<(String, Bytes)> {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(body) else {
        return Vec::new();
    };
    let data = &value["data"];
    let list = data["diff"]
        .as_array()
        .or_else(|| data["list"].as_array())
        .or_else(|| data.as_array());
    list.into_iter()
        .flatten()
        .filter_map(|item| {
            let code = mdproxy_api::code::row_code(item)?;
            let json = serde_json::to_vec(item).ok()?;
            Some((code, Bytes::from(json)))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::upstream::pace::PaceReport;
    use crate::upstream::quota::QuotaReport;

    #[test]
    fn items_are_keyed_by_canonical_code() {
        let body = br#"{"success":true,"data":{"list":[{"code":"600519","p":1},{"code":"000001.SZ","p":2},{"p":3}]}}"#;
        let items = parse_items(body);
        let codes: Vec<&str> = items.iter().map(|(c, _)| c.as_str()).collect();
        assert_eq!(codes, ["600519", "000001"]);
        assert!(parse_items(b"not json").is_empty());
    }

    /// Push2 rows (`data.diff`) carry a bare code and `marketId`; the row goes out
    /// unchanged.
    #[test]
    fn diff_rows_are_keyed_by_code_and_market_id() {
        let body = br#"{"success":true,"data":{"total":5,"diff":[
            {"code":"600519","marketId":1,"newPrice":150000},
            {"code":"000001","marketId":0},
            {"code":"920001","marketId":0},
            {"code":"000001","marketId":1},
            {"code":"300750.sz","marketId":0},
            "..."]}}"#;
        let items = parse_items(body);
        let codes: Vec<&str> = items.iter().map(|(c, _)| c.as_str()).collect();
        assert_eq!(
            codes,
            // The Shanghai index keeps its suffix: its digits imply Shenzhen.
            ["600519", "000001", "920001", "000001.SH", "300750"]
        );
        assert_eq!(
            &items[0].1[..],
            br#"{"code":"600519","marketId":1,"newPrice":150000}"#
        );
        // A bare data array with neither diff nor list.
        let bare = parse_items(br#"{"success":true,"data":[{"code":"430047"}]}"#);
        assert_eq!(bare[0].0, "430047");
    }

    /// A target at full rate, without quotas, not paused.
    fn target(label: &str) -> TargetReport {
        TargetReport {
            label: label.into(),
            base_url: String::new(),
            paused_for: None,
            pauses: 0,
            breaker_open: false,
            open_routes: Vec::new(),
            pace: PaceReport {
                rate: 20.0,
                ceiling: 20.0,
                floor: 1.0,
                reason: None,
                decreases: 0,
                full_in: Duration::ZERO,
            },
            quota: QuotaReport {
                per_minute: 0,
                per_day: 0,
                this_minute: 0,
                today: 0,
                projected_day: 0,
                skipped_today: 0,
                thrifty: false,
                day_resets_in: Duration::from_secs(86_400),
            },
            outcomes: Vec::new(),
        }
    }

    const SECOND: Duration = Duration::from_secs(1);

    /// Nothing holds an unthrottled poll back: the hub's interval decides.
    #[test]
    fn a_free_upstream_leaves_the_interval_alone() {
        assert_eq!(
            allowance(&[target("primary")], 3, SECOND),
            Allowance::default()
        );
        assert_eq!(allowance(&[], 3, SECOND), Allowance::default());
    }

    /// A pace halved doubles the interval; a quarter of it, four times.
    #[test]
    fn a_lower_pace_stretches_the_interval_alike() {
        let mut t = target("primary");
        t.pace.rate = 10.0;
        let a = allowance(std::slice::from_ref(&t), 1, 3 * SECOND);
        assert_eq!((a.spacing, a.reason), (6 * SECOND, Some("pace")));
        t.pace.rate = 5.0;
        assert_eq!(allowance(&[t], 1, 3 * SECOND).spacing, 12 * SECOND);
    }

    /// Half a minute's quota: 60 a minute and 3 requests a poll give a poll every
    /// 6 s. Half of what is left of the day, over the rest of it: 1,000 left for
    /// 10,000 s, one request a poll, one poll every 20 s; none left, the next day.
    #[test]
    fn quotas_keep_their_share_for_clients() {
        let mut t = target("primary");
        t.quota.per_minute = 60;
        let a = allowance(std::slice::from_ref(&t), 3, SECOND);
        assert_eq!((a.spacing, a.reason), (6 * SECOND, Some("minute_quota")));
        let mut t = target("primary");
        t.quota.per_day = 5_000;
        t.quota.today = 4_000;
        t.quota.day_resets_in = 10_000 * SECOND;
        let a = allowance(std::slice::from_ref(&t), 1, SECOND);
        assert_eq!((a.spacing, a.reason), (20 * SECOND, Some("day_quota")));
        t.quota.today = 5_000;
        assert_eq!(allowance(&[t], 1, SECOND).spacing, 10_000 * SECOND);
    }

    /// All paused: until the first pause ends. One paused, another free: the free
    /// one takes the poll, at its own pace.
    #[test]
    fn pauses_hold_the_poll_until_an_upstream_may_be_asked() {
        let mut primary = target("primary");
        primary.paused_for = Some(30 * SECOND);
        let mut fallback = target("fallback-1");
        fallback.paused_for = Some(10 * SECOND);
        let a = allowance(&[primary.clone(), fallback.clone()], 1, SECOND);
        assert_eq!((a.spacing, a.reason), (10 * SECOND, Some("paused")));
        fallback.paused_for = None;
        fallback.pace.rate = 10.0;
        let a = allowance(&[primary, fallback], 1, SECOND);
        assert_eq!((a.spacing, a.reason), (2 * SECOND, Some("pace")));
    }
}
