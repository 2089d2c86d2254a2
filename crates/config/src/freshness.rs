//! `[freshness]`: how long answers stay fresh, stale and usable on error, per class
//! and per endpoint, and how "not found" answers are kept.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use mdproxy_api::catalog::FreshnessClass;

/// Fresh and stale lifetimes of one freshness class, in session and out of it.
///
/// An answer fetched in session is fresh for `session_fresh_secs`; one fetched out of
/// session for `closed_fresh_secs`, and (with `until_open`) no longer than the next
/// open plus `freshness.open_grace_secs`. After that it is *stale* for the matching
/// `*_stale_secs`: served at once while one background request refreshes it. Until
/// `error_secs` after its fresh time it is still served when the upstream fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClassTtl {
    pub session_fresh_secs: u64,
    pub session_stale_secs: u64,
    pub closed_fresh_secs: u64,
    pub closed_stale_secs: u64,
    /// Out of session, stay fresh at most until the next open (plus the grace).
    pub until_open: bool,
    /// Stale-if-error window, counted from the end of the fresh time.
    pub error_secs: u64,
}

/// A per-endpoint override: any subset of [`ClassTtl`]'s keys.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TtlOverride {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_fresh_secs: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_stale_secs: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub closed_fresh_secs: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub closed_stale_secs: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub until_open: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_secs: Option<u64>,
}

/// `[freshness]`: TTLs per class, overrides per endpoint.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FreshnessConfig {
    /// "Shortly after the next open": how long past the open an answer fetched out
    /// of session may stay fresh, so that clients do not all miss at 09:15:00.
    pub open_grace_secs: u64,
    /// How long an upstream "not found" answer is cached (negative caching).
    pub negative_secs: u64,
    /// When an upstream "not found" is kept: from its first answer (`first_ask`),
    /// or once its key is asked again (`second_ask`, as nginx's
    /// `proxy_cache_min_uses 2`).
    pub negative_keep: NegativeKeep,
    /// One table per class, e.g. `[freshness.classes.live]`.
    pub classes: BTreeMap<FreshnessClass, ClassTtl>,
    /// Overrides by endpoint path template, e.g. `[freshness.endpoints."/market/indices"]`.
    pub endpoints: BTreeMap<String, TtlOverride>,
}

/// Days, in seconds.
const DAY: u64 = 86_400;

impl Default for FreshnessConfig {
    fn default() -> Self {
        // docs/DOMAIN.md §8.1: in-session TTLs; out of session until the next open for market
        // data (30 days only bounds it: the longest closure, Spring Festival, is ~9 days), shorter for news and overseas quotes; stale-if-error ≥ 1 h, 24 h or more
        // for reference data.
        let t = |sf, ss, cf, cs, until_open, error_secs| ClassTtl {
            session_fresh_secs: sf,
            session_stale_secs: ss,
            closed_fresh_secs: cf,
            closed_stale_secs: cs,
            until_open,
            error_secs,
        };
        let classes = FreshnessClass::ALL
            .into_iter()
            .map(|class| {
                let ttl = match class {
                    FreshnessClass::Live => t(3, 6, 30 * DAY, 60, true, 3_600),
                    // The last bar moves with every trade and a new one starts each
                    // minute: fresher than daily bars, though not a quote.
                    FreshnessClass::Minute => t(10, 20, 30 * DAY, 300, true, 3_600),
                    FreshnessClass::Intraday => t(15, 30, 30 * DAY, 300, true, 3_600),
                    FreshnessClass::News => t(60, 120, 300, 600, false, 3_600),
                    // Announcements land through the day and mostly in the evening:
                    // half an hour in session, an hour out of it, never held till the open.
                    FreshnessClass::Filings => t(1_800, 1_800, 3_600, 3_600, false, DAY),
                    FreshnessClass::Daily => t(3_600, 3_600, 12 * 3_600, 3_600, false, DAY),
                    FreshnessClass::Reference => t(60, 600, DAY, 3_600, true, DAY),
                    // Published once a year (each December); a day keeps a correction
                    // from waiting long.
                    FreshnessClass::Calendar => t(DAY, DAY, DAY, DAY, false, 30 * DAY),
                    FreshnessClass::Periodic => t(12 * 3_600, 3_600, DAY, 3_600, false, 7 * DAY),
                    FreshnessClass::Macro => t(6 * 3_600, 3_600, 12 * 3_600, 3_600, false, 7 * DAY),
                    // Final answers: kept for a week, served on error for a month.
                    FreshnessClass::Immutable => {
                        t(7 * DAY, 7 * DAY, 7 * DAY, 7 * DAY, false, 30 * DAY)
                    }
                };
                (class, ttl)
            })
            .collect();
        // Overseas markets trade while China is closed (docs/DOMAIN.md §3): 30 s / 60 s.
        let global = TtlOverride {
            session_fresh_secs: Some(30),
            closed_fresh_secs: Some(60),
            until_open: Some(false),
            ..TtlOverride::default()
        };
        FreshnessConfig {
            open_grace_secs: 60,
            negative_secs: 30,
            negative_keep: NegativeKeep::FirstAsk,
            classes,
            endpoints: BTreeMap::from([("/market/global-index".to_owned(), global)]),
        }
    }
}

/// See [`FreshnessConfig::negative_keep`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NegativeKeep {
    /// Kept from its first answer: the upstream hears of an unknown key once each
    /// `negative_secs`. A key's first 404 waits in a small table beside the store
    /// (a sixteenth of `cache.max_bytes`), and moves into the store when the key is
    /// asked again.
    #[default]
    FirstAsk,
    /// Kept once the key is asked again while the node remembers its last answer
    /// (among its latest uncached "not found"s): a scan of keys asked once each
    /// fills no memory, and a key asked again costs the upstream one more request.
    SecondAsk,
}
