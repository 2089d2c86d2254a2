//! Freshness decisions: the TTL table per endpoint and class, the lifetimes of an
//! answer (fresh, stale-while-revalidate, stale-if-error) from the market clock, and
//! the pure function that places an instant among them. The cache stores the
//! lifetimes; moka's expiry is only the memory bound.

use chrono::{DateTime, NaiveDate, Timelike, Utc};

use mdproxy_api::catalog::{FreshnessClass, catalog};
use mdproxy_config::{ClassTtl, Config, NegativeKeep};
use mdproxy_market::{Calendar, Venue};

/// The state of a cached answer at a moment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Freshness {
    /// Serve it (for how long: [`Lifetimes::ttl_secs`]).
    Fresh,
    /// Serve it at once and refresh it in the background (stale-while-revalidate).
    Stale,
    /// Serve it only if the upstream fails (stale-if-error).
    StaleIfError,
    /// Never serve it.
    Expired,
}

impl Freshness {
    /// Stable label.
    pub fn as_str(self) -> &'static str {
        match self {
            Freshness::Fresh => "fresh",
            Freshness::Stale => "stale",
            Freshness::StaleIfError => "stale_if_error",
            Freshness::Expired => "expired",
        }
    }

    /// Whether an upstream failure may be answered with this entry.
    pub fn is_usable_on_error(self) -> bool {
        self != Freshness::Expired
    }
}

/// When an answer stops being fresh, stale and usable on error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lifetimes {
    pub fresh_until: DateTime<Utc>,
    pub stale_until: DateTime<Utc>,
    pub error_until: DateTime<Utc>,
}

impl Lifetimes {
    /// Where `now` falls (comparisons only: a hit decides twice, and chrono's
    /// subtraction is the costly part of its date arithmetic).
    pub fn decide(&self, now: DateTime<Utc>) -> Freshness {
        if now < self.fresh_until {
            Freshness::Fresh
        } else if now < self.stale_until {
            Freshness::Stale
        } else if now < self.error_until {
            Freshness::StaleIfError
        } else {
            Freshness::Expired
        }
    }

    /// Seconds past the fresh time (negative while fresh), for `Cache-Status: ttl=`.
    pub fn ttl_secs(&self, now: DateTime<Utc>) -> i64 {
        whole_secs(self.fresh_until, now)
    }
}

/// What decides the lifetimes of one answer besides the time it was fetched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rule {
    pub endpoint_id: usize,
    pub class: FreshnessClass,
    /// Expire at the next open whatever the class says (forward-adjusted K-lines).
    pub until_open: bool,
    /// An upstream "not found": cached briefly, never served stale.
    pub negative: bool,
    /// The first date (where the venue trades) on which an answer fetched is final:
    /// then it lives under the [`FreshnessClass::Immutable`] TTLs whatever its class.
    pub settles: Option<NaiveDate>,
    /// The market whose sessions decide "in session" and "the next open" for this
    /// answer (HK codes: Hong Kong's; US secids: New York's).
    pub venue: Venue,
}

impl Rule {
    /// The rule of a validated request.
    pub fn of(valid: &mdproxy_api::params::Valid) -> Rule {
        Rule {
            endpoint_id: valid.endpoint.id,
            class: valid.class,
            until_open: valid.until_open,
            negative: false,
            settles: valid.settles,
            venue: valid.venue,
        }
    }

    /// The class an answer fetched at `fetched_at` lives under: `Immutable` once its
    /// data can no longer change, else its own.
    pub fn class_at(&self, fetched_at: DateTime<Utc>) -> FreshnessClass {
        match self.settles {
            Some(day) if self.venue.date(fetched_at) >= day => FreshnessClass::Immutable,
            _ => self.class,
        }
    }
}

/// The TTL table resolved for every endpoint and class, and the market calendar.
#[derive(Clone, Debug)]
pub struct Policy {
    /// Increases with every applied configuration; entries remember the generation
    /// their lifetimes were computed under.
    generation: u64,
    /// `table[endpoint.id][class index]`.
    table: Vec<[ClassTtl; FreshnessClass::ALL.len()]>,
    calendar: Calendar,
    open_grace: chrono::Duration,
    negative: chrono::Duration,
    negative_keep: NegativeKeep,
}

fn secs(s: u64) -> chrono::Duration {
    chrono::Duration::seconds(i64::try_from(s).unwrap_or(i64::MAX / 1_000_000))
}

impl Policy {
    /// Resolves `config`'s classes, per-endpoint overrides and calendar, as
    /// configuration generation `generation`.
    ///
    /// # Panics
    /// On a config that did not pass `validate()`.
    pub fn new(config: &Config, generation: u64) -> Policy {
        let table = catalog()
            .with_passthrough()
            .map(|e| FreshnessClass::ALL.map(|class| config.ttl(&e.path, class)))
            .collect();
        let calendar = if config.calendar.holidays.is_empty() {
            Calendar::builtin()
        } else {
            Calendar::from_dates(config.calendar.holidays.iter().copied())
        };
        Policy {
            generation,
            table,
            calendar,
            open_grace: secs(config.freshness.open_grace_secs),
            negative: secs(config.freshness.negative_secs),
            negative_keep: config.freshness.negative_keep,
        }
    }

    /// When an upstream "not found" is kept (`freshness.negative_keep`).
    pub fn negative_keep(&self) -> NegativeKeep {
        self.negative_keep
    }

    /// The configuration generation this policy belongs to.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Whether an answer of `endpoint_id` and `class` fetched out of session stays
    /// fresh until the next open (plus the grace): when its class or endpoint says so,
    /// or when its request asks for it (`keyed`: forward-adjusted K-lines). The one
    /// place the until-open rule is written.
    pub fn until_open(&self, endpoint_id: usize, class: FreshnessClass, keyed: bool) -> bool {
        self.ttl(endpoint_id, class).until_open || keyed
    }

    /// The TTLs of an endpoint for an answer of `class`.
    pub fn ttl(&self, endpoint_id: usize, class: FreshnessClass) -> ClassTtl {
        self.table[endpoint_id][class.index()]
    }

    /// The market calendar.
    pub fn calendar(&self) -> &Calendar {
        &self.calendar
    }

    /// The lifetimes of an answer fetched at `fetched_at` under `rule`.
    pub fn lifetimes(&self, rule: Rule, fetched_at: DateTime<Utc>) -> Lifetimes {
        if rule.negative {
            let until = fetched_at + self.negative;
            return Lifetimes {
                fresh_until: until,
                stale_until: until,
                error_until: until,
            };
        }
        let class = rule.class_at(fetched_at);
        if class != rule.class {
            // Final: the same lifetimes in and out of session, never until the open.
            let ttl = self.ttl(rule.endpoint_id, class);
            let fresh_until = fetched_at + secs(ttl.closed_fresh_secs);
            return Lifetimes {
                fresh_until,
                stale_until: fresh_until + secs(ttl.closed_stale_secs),
                error_until: fresh_until + secs(ttl.error_secs.max(ttl.closed_stale_secs)),
            };
        }
        let ttl = self.ttl(rule.endpoint_id, rule.class);
        let in_session = self.calendar.is_open_at(rule.venue, fetched_at);
        let (fresh, stale) = if in_session {
            (ttl.session_fresh_secs, ttl.session_stale_secs)
        } else {
            (ttl.closed_fresh_secs, ttl.closed_stale_secs)
        };
        let mut fresh_until = fetched_at + secs(fresh);
        if !in_session && self.until_open(rule.endpoint_id, rule.class, rule.until_open) {
            let next_open = self.calendar.next_open_at(rule.venue, fetched_at);
            fresh_until = fresh_until.min(next_open + self.open_grace);
        }
        if in_session && rule.until_open {
            // Fetched in session: still never fresh past the next session's start.
            fresh_until = fresh_until.min(self.calendar.next_open_at(rule.venue, fetched_at));
        }
        Lifetimes {
            fresh_until,
            stale_until: fresh_until + secs(stale),
            error_until: fresh_until + secs(ttl.error_secs.max(stale)),
        }
    }
}

/// Whole seconds from `start` to `end`, truncated toward zero as chrono's
/// `num_seconds` does. A hit asks twice (`Age`, the `ttl`), nearly always for two
/// instants of one UTC day: then it is the difference of the times of day, where
/// chrono's subtraction does day arithmetic first (about 110 instructions each, a
/// nanosecond timestamp about 90). Other days and leap seconds are chrono's.
pub fn whole_secs(end: DateTime<Utc>, start: DateTime<Utc>) -> i64 {
    const NANOS: i64 = 1_000_000_000;
    let (e, s) = (end.naive_utc(), start.naive_utc());
    let leap = |t: &chrono::NaiveDateTime| i64::from(t.nanosecond()) >= NANOS;
    if e.date() == s.date() && !leap(&e) && !leap(&s) {
        let secs =
            i64::from(e.num_seconds_from_midnight()) - i64::from(s.num_seconds_from_midnight());
        return (secs * NANOS + i64::from(e.nanosecond()) - i64::from(s.nanosecond())) / NANOS;
    }
    (end - start).num_seconds()
}

/// The age of an answer fetched at `fetched_at`, in whole seconds (0 for one
/// from the future, as a clock step back could make it).
pub fn age_secs(now: DateTime<Utc>, fetched_at: DateTime<Utc>) -> u64 {
    u64::try_from(whole_secs(now, fetched_at)).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use mdproxy_market::{Clock, ManualClock, cst};

    fn rule(path: &str) -> Rule {
        let e = catalog().by_path(path).unwrap();
        Rule {
            endpoint_id: e.id,
            class: e.class,
            until_open: false,
            negative: false,
            settles: None,
            venue: Venue::China,
        }
    }

    #[test]
    fn in_session_answers_keep_the_session_ttl() {
        let p = Policy::new(&Config::default(), 0);
        let fetched = cst("2026-03-02 10:00:00"); // Monday, in session
        let l = p.lifetimes(rule("/market/indices"), fetched);
        assert_eq!(l.fresh_until, cst("2026-03-02 10:00:03"));
        assert_eq!(l.stale_until, cst("2026-03-02 10:00:09"));
        assert_eq!(l.decide(cst("2026-03-02 10:00:02")), Freshness::Fresh);
        assert_eq!(l.ttl_secs(cst("2026-03-02 10:00:02")), 1);
        assert_eq!(l.ttl_secs(cst("2026-03-02 10:00:05")), -2);
        assert_eq!(l.decide(cst("2026-03-02 10:00:05")), Freshness::Stale);
        assert_eq!(
            l.decide(cst("2026-03-02 10:30:00")),
            Freshness::StaleIfError
        );
        assert_eq!(l.decide(cst("2026-03-02 12:00:00")), Freshness::Expired);
    }

    #[test]
    fn after_the_close_answers_stay_fresh_until_shortly_after_the_next_open() {
        let p = Policy::new(&Config::default(), 0);
        let friday_evening = cst("2026-03-06 16:00:00");
        let l = p.lifetimes(rule("/market/indices"), friday_evening);
        assert_eq!(
            l.fresh_until,
            cst("2026-03-09 09:16:00"),
            "Monday's open plus the grace"
        );
        // Lunch: until 13:00 plus the grace.
        let l = p.lifetimes(rule("/stock/kline"), cst("2026-03-02 11:45:00"));
        assert_eq!(l.fresh_until, cst("2026-03-02 13:01:00"));
        // Before a long holiday: until the first session after it.
        let l = p.lifetimes(rule("/market/indices"), cst("2026-09-30 15:30:00"));
        assert_eq!(l.fresh_until, cst("2026-10-08 09:16:00"));
    }

    #[test]
    fn news_and_overseas_quotes_are_not_frozen_until_the_open() {
        let p = Policy::new(&Config::default(), 0);
        let evening = cst("2026-03-06 21:00:00");
        let feed = p.lifetimes(rule("/news/feed"), evening);
        assert_eq!(feed.fresh_until, cst("2026-03-06 21:05:00"));
        let global = p.lifetimes(rule("/market/global-index"), evening);
        assert_eq!(global.fresh_until, cst("2026-03-06 21:01:00"));
    }

    #[test]
    fn forward_adjusted_klines_expire_at_the_next_open() {
        let mut config = Config::default();
        // Even if an operator lets intraday data outlive the open...
        config
            .freshness
            .classes
            .get_mut(&FreshnessClass::Intraday)
            .unwrap()
            .until_open = false;
        let p = Policy::new(&config, 0);
        let mut r = rule("/stock/kline");
        let evening = cst("2026-03-06 18:00:00");
        assert!(p.lifetimes(r, evening).fresh_until > cst("2026-03-10 00:00:00"));
        r.until_open = true;
        assert_eq!(
            p.lifetimes(r, evening).fresh_until,
            cst("2026-03-09 09:16:00")
        );
    }

    /// A K-line range that ended before the day it was fetched on lives for days,
    /// in session too; the same range fetched on its last day keeps the session rule.
    #[test]
    fn settled_answers_live_under_the_immutable_class() {
        let p = Policy::new(&Config::default(), 0);
        let mut r = rule("/stock/kline");
        r.settles = Some(chrono::NaiveDate::from_ymd_opt(2026, 3, 3).unwrap());
        let monday = cst("2026-03-02 10:00:00");
        assert_eq!(
            p.lifetimes(r, monday).fresh_until,
            cst("2026-03-02 10:00:15"),
            "the range ends today: intraday"
        );
        let tuesday = cst("2026-03-03 10:00:00");
        let l = p.lifetimes(r, tuesday);
        assert_eq!(l.fresh_until, cst("2026-03-10 10:00:00"), "seven days");
        assert_eq!(r.class_at(tuesday), FreshnessClass::Immutable);
    }

    /// At 15:30 China time an HK answer is in session (3 s for a quote class), a US
    /// one is held until New York's open plus the grace, and a US range ending on the
    /// New York date of the fetch is not final yet.
    #[test]
    fn hk_and_us_answers_follow_their_venue() {
        let p = Policy::new(&Config::default(), 0);
        let t = cst("2026-03-02 15:30:00");
        let mut r = rule("/stock/kline");
        assert_eq!(p.lifetimes(r, t).fresh_until, cst("2026-03-03 09:16:00"));
        r.venue = Venue::HongKong;
        assert_eq!(p.lifetimes(r, t).fresh_until, cst("2026-03-02 15:30:15"));
        r.venue = Venue::NewYork;
        assert_eq!(p.lifetimes(r, t).fresh_until, cst("2026-03-02 22:31:00"));
        r.settles = Some(chrono::NaiveDate::from_ymd_opt(2026, 3, 3).unwrap());
        let monday_in_new_york = cst("2026-03-03 00:30:00");
        assert_eq!(r.class_at(monday_in_new_york), FreshnessClass::Intraday);
        assert_eq!(
            r.class_at(cst("2026-03-03 14:00:00")),
            FreshnessClass::Immutable
        );
    }

    #[test]
    fn negative_answers_live_briefly_and_never_stale() {
        let p = Policy::new(&Config::default(), 0);
        let mut r = rule("/stock/detail/{code}");
        r.negative = true;
        let t = cst("2026-03-02 10:00:00");
        let l = p.lifetimes(r, t);
        assert_eq!(l.fresh_until, cst("2026-03-02 10:00:30"));
        assert_eq!(l.decide(cst("2026-03-02 10:00:31")), Freshness::Expired);
    }

    #[test]
    fn endpoint_overrides_apply() {
        let mut config = Config::default();
        config.freshness.endpoints.insert(
            "/market/indices".into(),
            mdproxy_config::TtlOverride {
                session_fresh_secs: Some(1),
                ..Default::default()
            },
        );
        let policy = Policy::new(&config, 0);
        let indices = catalog().by_path("/market/indices").unwrap();
        let list = catalog().by_path("/stock/list").unwrap();
        assert_eq!(
            policy
                .ttl(indices.id, FreshnessClass::Live)
                .session_fresh_secs,
            1
        );
        assert_eq!(
            policy.ttl(list.id, FreshnessClass::Live).session_fresh_secs,
            3
        );
    }

    /// The cheap subtraction truncates as chrono's does, across days, signs and
    /// fractions, and falls back to chrono where nanosecond timestamps end.
    #[test]
    fn whole_secs_is_chronos_num_seconds() {
        let base = cst("2026-03-02 23:59:58");
        let far = chrono::DateTime::<Utc>::MAX_UTC - chrono::Duration::days(1);
        for ms in [
            0,
            1,
            999,
            1_000,
            1_001,
            2_500,
            86_400_000,
            90_061_999,
            -1,
            -999,
            -1_000,
            -1_001,
            -86_400_001,
        ] {
            let other = base + chrono::Duration::milliseconds(ms);
            for (end, start) in [(other, base), (base, other), (far, other), (other, far)] {
                assert_eq!(
                    whole_secs(end, start),
                    (end - start).num_seconds(),
                    "{end} - {start}"
                );
            }
        }
        let leap = chrono::NaiveDate::from_ymd_opt(2016, 12, 31)
            .and_then(|d| d.and_hms_nano_opt(23, 59, 59, 1_500_000_000))
            .unwrap()
            .and_utc();
        for other in [
            leap - chrono::Duration::milliseconds(700),
            leap + chrono::Duration::seconds(3),
        ] {
            for (end, start) in [(other, leap), (leap, other)] {
                assert_eq!(
                    whole_secs(end, start),
                    (end - start).num_seconds(),
                    "{end} - {start}"
                );
            }
        }
        let tiny = base + chrono::Duration::nanoseconds(1);
        assert_eq!(whole_secs(base, tiny), 0);
        assert_eq!(whole_secs(tiny, base), 0);
    }

    #[test]
    fn manual_clock_moves_only_when_told() {
        let start = cst("2026-03-02 09:30:00");
        let clock = ManualClock::new(start);
        clock.advance(std::time::Duration::from_secs(90));
        assert_eq!(age_secs(clock.now(), start), 90);
        assert_eq!(age_secs(start, clock.now()), 0);
    }
}
