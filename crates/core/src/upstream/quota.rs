//! Quotas the vendor sells keys by: at most `per_minute` upstream requests in each
//! minute and `per_day` in each day, the day starting at the vendor's boundary (China
//! midnight by default). The day is paced for client misses: background refreshes and
//! prewarm stop first when what is left runs low (`reserve_percent`), and below half
//! of that the cache prefers a stale answer to a refresh. Counted on the wall clock
//! the rest of the cache reads (a test's clock runs a day in seconds).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, NaiveDate, NaiveTime, TimeZone, Utc};
use chrono_tz::Tz;

use crate::upstream::budget::Priority;
use mdproxy_fleet::limits::{QuotaAsk, QuotaCount, QuotaVerdict};
use mdproxy_market::Clock;

/// `[limits] upstream_per_minute`, `upstream_per_day` and the day's boundary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QuotaSettings {
    /// 0: no minute quota.
    pub per_minute: u64,
    /// 0: no day quota.
    pub per_day: u64,
    /// Percent of the day's quota kept for client misses: background work stops when
    /// less than this is left.
    pub reserve_percent: u32,
    /// When the vendor's day starts, in `zone`.
    pub day_start: NaiveTime,
    pub zone: Tz,
}

/// Why the quota says no.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exhausted {
    /// This minute's quota is spent; the next minute starts in `resets_in`.
    Minute { resets_in: Duration },
    /// This day's quota is spent.
    Day { resets_in: Duration },
    /// Background work stepped back to keep the day's reserve for clients.
    Reserve,
}

impl Exhausted {
    /// When asking again can help (zero for the reserve: it lasts the day).
    pub fn resets_in(self) -> Duration {
        match self {
            Exhausted::Minute { resets_in } | Exhausted::Day { resets_in } => resets_in,
            Exhausted::Reserve => Duration::ZERO,
        }
    }
}

#[derive(Debug, Default)]
struct Counts {
    /// The minute (Unix minutes) and the vendor day counted now.
    minute: i64,
    day: Option<NaiveDate>,
    in_minute: u64,
    in_day: u64,
    /// The fleet's counts of this minute and day when it last counted for this
    /// node: where its share starts while the fleet cannot be asked.
    heard_minute: u64,
    heard_day: u64,
    /// Background or prewarm requests that stepped back for the reserve, today.
    skipped: u64,
}

/// The spend, for `/status` and metrics.
#[derive(Clone, Debug, PartialEq)]
pub struct QuotaReport {
    pub per_minute: u64,
    pub per_day: u64,
    pub this_minute: u64,
    pub today: u64,
    /// Today's spend carried to the end of the day at today's pace.
    pub projected_day: u64,
    pub skipped_today: u64,
    /// Whether the cache prefers stale answers to refreshes now.
    pub thrifty: bool,
    /// How long until the vendor's next day starts (and the day quota with it).
    pub day_resets_in: Duration,
}

/// The requests of the day kept for client misses (`reserve_percent` of
/// `per_day`), without overflow for any `per_day`.
fn reserve_of(s: QuotaSettings) -> u64 {
    u64::try_from(u128::from(s.per_day) * u128::from(s.reserve_percent) / 100).unwrap_or(u64::MAX)
}

/// A node's limit of `limit` among `nodes` counting alone: the fleet's count
/// when last heard (`heard`), and its share of what was left then.
fn share_of(limit: u64, heard: u64, nodes: u64) -> u64 {
    heard + limit.saturating_sub(heard) / nodes.max(1)
}

/// The quotas of one upstream.
pub struct Quota {
    settings: QuotaSettings,
    clock: Arc<dyn Clock>,
    counts: Mutex<Counts>,
}

impl std::fmt::Debug for Quota {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Quota")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl Quota {
    /// Nothing spent yet.
    pub fn new(settings: QuotaSettings, clock: Arc<dyn Clock>) -> Quota {
        Quota {
            settings,
            clock,
            counts: Mutex::default(),
        }
    }

    /// Its settings.
    pub fn settings(&self) -> QuotaSettings {
        self.settings
    }

    /// The vendor day `at` falls in, and when the next one starts.
    fn day_of(&self, at: DateTime<Utc>) -> (NaiveDate, DateTime<Utc>) {
        let local = at.with_timezone(&self.settings.zone);
        let mut day = local.date_naive();
        if local.time() < self.settings.day_start {
            day = day.pred_opt().unwrap_or(day);
        }
        let next = day
            .succ_opt()
            .and_then(|d| {
                self.settings
                    .zone
                    .from_local_datetime(&d.and_time(self.settings.day_start))
                    .earliest()
            })
            .map_or(at + chrono::Duration::days(1), |t| t.with_timezone(&Utc));
        (day, next)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Counts> {
        self.counts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Brings the counts forward to the minute and day of `now`; never back: a
    /// clock stepped back (NTP, an hour repeated at a change of summer time) keeps
    /// counting in the later window instead of starting it afresh a second time.
    fn roll(&self, counts: &mut Counts, now: DateTime<Utc>) -> DateTime<Utc> {
        let minute = now.timestamp().div_euclid(60);
        if minute > counts.minute {
            counts.minute = minute;
            counts.in_minute = 0;
            counts.heard_minute = 0;
        }
        let (day, next_day) = self.day_of(now);
        if counts.day.is_none_or(|counted| day > counted) {
            counts.day = Some(day);
            counts.in_day = 0;
            counts.heard_day = 0;
            counts.skipped = 0;
        }
        next_day
    }

    /// Takes one request from the quotas at `priority`.
    ///
    /// # Errors
    /// Which quota is spent, or that background work keeps the reserve.
    pub fn take(&self, priority: Priority) -> Result<(), Exhausted> {
        self.decide(priority, true, 1)
    }

    /// Takes one request at `priority` for a node of a fleet of `nodes` that
    /// cannot ask the fleet: from its share, a `nodes`th of what the fleet had
    /// left when it last counted for this node (of the minute and of the day, and
    /// of the day's reserve), so that the fleet's nodes alone together stay within
    /// the quotas. Rounded down: four nodes sharing three requests a minute send
    /// none alone.
    ///
    /// # Errors
    /// As [`take`](Self::take).
    pub fn take_alone(&self, priority: Priority, nodes: u64) -> Result<(), Exhausted> {
        self.decide(priority, true, nodes.max(1))
    }

    /// Whether [`take`](Self::take) would give a request now, without taking it:
    /// asked before the budget, so a spent quota costs no permit and no wait.
    ///
    /// # Errors
    /// As [`take`](Self::take).
    pub fn check(&self, priority: Priority) -> Result<(), Exhausted> {
        self.decide(priority, false, 1)
    }

    /// [`check`](Self::check) against this node's share for a fleet of `nodes`,
    /// as [`take_alone`](Self::take_alone) will take.
    ///
    /// # Errors
    /// As [`take`](Self::take).
    pub fn check_alone(&self, priority: Priority, nodes: u64) -> Result<(), Exhausted> {
        self.decide(priority, false, nodes.max(1))
    }

    /// [`take`](Self::take) or [`check`](Self::check) (`take` false), within a
    /// `nodes`th share (1: the whole quotas).
    fn decide(&self, priority: Priority, take: bool, nodes: u64) -> Result<(), Exhausted> {
        let s = self.settings;
        if s.per_minute == 0 && s.per_day == 0 {
            return Ok(());
        }
        let now = self.clock.now();
        let mut counts = self.lock();
        let next_day = self.roll(&mut counts, now);
        let until = |t: DateTime<Utc>| (t - now).to_std().unwrap_or(Duration::ZERO);
        let share = |limit: u64, heard: u64| share_of(limit, heard, nodes);
        if s.per_day > 0 {
            let per_day = share(s.per_day, counts.heard_day);
            if counts.in_day >= per_day {
                return Err(Exhausted::Day {
                    resets_in: until(next_day),
                });
            }
            let left = per_day - counts.in_day;
            let reserve = reserve_of(s) / nodes;
            if !priority.is_clients() && left <= reserve {
                counts.skipped += 1;
                return Err(Exhausted::Reserve);
            }
        }
        if s.per_minute > 0 && counts.in_minute >= share(s.per_minute, counts.heard_minute) {
            let next_minute = (counts.minute + 1) * 60;
            let resets_in =
                Duration::from_secs(u64::try_from(next_minute - now.timestamp()).unwrap_or(1));
            return Err(Exhausted::Minute { resets_in });
        }
        if take {
            counts.in_minute += 1;
            counts.in_day += 1;
        }
        Ok(())
    }

    /// What a fleet is asked to count for one request at `priority` now: the
    /// limits and the periods it falls in (`None`: no quota to count).
    pub fn ask(&self, priority: Priority) -> Option<QuotaAsk> {
        let s = self.settings;
        if s.per_minute == 0 && s.per_day == 0 {
            return None;
        }
        let now = self.clock.now();
        let (day, next_day) = self.day_of(now);
        let minute = now.timestamp().div_euclid(60);
        let next_minute = (minute + 1) * 60;
        Some(QuotaAsk {
            per_minute: s.per_minute,
            per_day: s.per_day,
            reserve: reserve_of(s),
            client: priority.is_clients(),
            minute,
            day: day.to_string(),
            minute_ends_in: Duration::from_secs(
                u64::try_from(next_minute - now.timestamp()).unwrap_or(1),
            ),
            day_ends_in: (next_day - now).to_std().unwrap_or(Duration::ZERO),
        })
    }

    /// Takes in the fleet's count of the request asked as `ask`: the spend shown
    /// becomes the fleet's (and is where this node counts on from if the fleet
    /// goes away), and the verdict is [`take`](Self::take)'s.
    ///
    /// # Errors
    /// As [`take`](Self::take).
    pub fn settle(&self, ask: &QuotaAsk, count: QuotaCount) -> Result<(), Exhausted> {
        let mut counts = self.lock();
        self.roll(&mut counts, self.clock.now());
        if counts.minute == ask.minute {
            counts.in_minute = count.this_minute;
            counts.heard_minute = count.this_minute;
        }
        if counts.day.is_some_and(|d| d.to_string() == ask.day) {
            counts.in_day = count.today;
            counts.heard_day = count.today;
        }
        match count.verdict {
            QuotaVerdict::Counted => Ok(()),
            QuotaVerdict::MinuteSpent => Err(Exhausted::Minute {
                resets_in: ask.minute_ends_in,
            }),
            QuotaVerdict::DaySpent => Err(Exhausted::Day {
                resets_in: ask.day_ends_in,
            }),
            QuotaVerdict::Reserve => {
                counts.skipped += 1;
                Err(Exhausted::Reserve)
            }
        }
    }

    /// Whether what is left of the day is under half the reserve: then a stale
    /// answer is served instead of a refresh wherever one may stand in.
    pub fn is_thrifty(&self) -> bool {
        self.is_thrifty_alone(1)
    }

    /// [`is_thrifty`](Self::is_thrifty) for a node of a fleet of `nodes` that
    /// counts alone: of its share of the day, and of its share of the reserve.
    pub fn is_thrifty_alone(&self, nodes: u64) -> bool {
        let s = self.settings;
        if s.per_day == 0 {
            return false;
        }
        let nodes = nodes.max(1);
        let mut counts = self.lock();
        self.roll(&mut counts, self.clock.now());
        let per_day = share_of(s.per_day, counts.heard_day, nodes);
        let left = per_day.saturating_sub(counts.in_day);
        // Under half of `reserve / nodes`, without the divisions' rounding.
        u128::from(left) * 200 * u128::from(nodes)
            <= u128::from(s.per_day) * u128::from(s.reserve_percent)
    }

    /// The spend so far.
    pub fn report(&self) -> QuotaReport {
        let now = self.clock.now();
        let thrifty = self.is_thrifty();
        let mut counts = self.lock();
        let next_day = self.roll(&mut counts, now);
        let day_secs = 86_400.0;
        let left_secs = (next_day - now).num_seconds().clamp(0, 86_400) as f64;
        let elapsed = (day_secs - left_secs).max(60.0);
        let projected_day = (counts.in_day as f64 * day_secs / elapsed).round() as u64;
        QuotaReport {
            per_minute: self.settings.per_minute,
            per_day: self.settings.per_day,
            this_minute: counts.in_minute,
            today: counts.in_day,
            projected_day,
            skipped_today: counts.skipped,
            thrifty,
            day_resets_in: (next_day - now).to_std().unwrap_or(Duration::ZERO),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mdproxy_market::{ManualClock, cst};

    fn quota(per_minute: u64, per_day: u64) -> (Quota, Arc<ManualClock>) {
        let clock = ManualClock::new(cst("2026-03-02 23:59:00"));
        let settings = QuotaSettings {
            per_minute,
            per_day,
            reserve_percent: 20,
            day_start: NaiveTime::MIN,
            zone: chrono_tz::Asia::Shanghai,
        };
        (Quota::new(settings, clock.clone()), clock)
    }

    #[test]
    fn the_minute_quota_resets_with_the_minute() {
        let (q, clock) = quota(3, 0);
        for _ in 0..3 {
            assert_eq!(q.take(Priority::Client), Ok(()));
        }
        assert_eq!(
            q.take(Priority::Client),
            Err(Exhausted::Minute {
                resets_in: Duration::from_secs(60)
            })
        );
        clock.advance(Duration::from_secs(60));
        assert_eq!(q.take(Priority::Client), Ok(()));
    }

    #[test]
    fn the_day_keeps_a_reserve_for_clients_and_resets_at_china_midnight() {
        let (q, clock) = quota(0, 10);
        // 20 % of 10: background stops with 2 left.
        for _ in 0..8 {
            assert_eq!(q.take(Priority::Background), Ok(()));
        }
        assert_eq!(q.take(Priority::Prewarm), Err(Exhausted::Reserve));
        assert_eq!(
            q.check(Priority::Probe),
            Ok(()),
            "a probe may spend the reserve"
        );
        assert!(!q.is_thrifty(), "2 left is the reserve, not half of it");
        assert_eq!(q.take(Priority::Client), Ok(()));
        assert!(q.is_thrifty(), "1 left: half the reserve");
        assert_eq!(q.take(Priority::Client), Ok(()));
        assert_eq!(
            q.take(Priority::Client),
            Err(Exhausted::Day {
                resets_in: Duration::from_secs(60)
            })
        );
        let report = q.report();
        assert_eq!((report.today, report.skipped_today), (10, 1));
        // Midnight in Shanghai: a new day.
        clock.advance(Duration::from_secs(60));
        assert_eq!(q.take(Priority::Background), Ok(()));
        assert_eq!(q.report().today, 1);
    }

    /// The fleet is asked with this minute, this vendor day and when each ends; its
    /// count becomes what this node shows and counts on from.
    #[test]
    fn the_fleet_counts_and_this_node_shows_its_count() {
        let (q, _) = quota(5, 10);
        let ask = q.ask(Priority::Background).unwrap();
        assert_eq!(ask.day, "2026-03-02");
        assert_eq!(ask.minute_ends_in, Duration::from_secs(60));
        assert_eq!(ask.day_ends_in, Duration::from_secs(60));
        assert_eq!((ask.reserve, ask.client), (2, false));
        let count = |verdict, this_minute, today| QuotaCount {
            verdict,
            this_minute,
            today,
        };
        assert_eq!(q.settle(&ask, count(QuotaVerdict::Counted, 3, 7)), Ok(()));
        assert_eq!((q.report().this_minute, q.report().today), (3, 7));
        assert_eq!(
            q.settle(&ask, count(QuotaVerdict::Reserve, 3, 8)),
            Err(Exhausted::Reserve)
        );
        // Alone again: counted on from the fleet's count (2 of the day left).
        assert_eq!(q.take(Priority::Client), Ok(()));
        assert_eq!(q.take(Priority::Client), Ok(()));
        assert!(matches!(
            q.take(Priority::Client),
            Err(Exhausted::Day { .. })
        ));
        assert_eq!(q.ask(Priority::Client).map(|a| a.client), Some(true));
    }

    /// Defect: a fleet node that could not ask the fleet counted on alone up to
    /// the whole quotas, so a fleet of four without Redis could spend four times
    /// what was left of the day and four minutes' worth a minute. Alone, a node
    /// takes a `nodes`th of what was left when the fleet last counted for it, and
    /// of the reserve.
    #[test]
    fn alone_a_fleet_node_takes_its_share_of_what_was_left() {
        let (q, clock) = quota(8, 100);
        let ask = q.ask(Priority::Client).unwrap();
        let counted = QuotaCount {
            verdict: QuotaVerdict::Counted,
            this_minute: 4,
            today: 40,
        };
        assert_eq!(q.settle(&ask, counted), Ok(()));
        // This minute: 4 + (8 - 4) / 4 = 5, one more.
        assert_eq!(q.check_alone(Priority::Client, 4), Ok(()));
        assert_eq!(q.take_alone(Priority::Client, 4), Ok(()));
        assert!(matches!(
            q.take_alone(Priority::Client, 4),
            Err(Exhausted::Minute { .. })
        ));
        // Checked before the budget against the same share: a spent share costs
        // no permit and no wait.
        assert!(matches!(
            q.check_alone(Priority::Client, 4),
            Err(Exhausted::Minute { .. })
        ));
        assert_eq!(
            q.check(Priority::Client),
            Ok(()),
            "the whole quota has room"
        );
        assert_eq!(
            q.take(Priority::Client),
            Ok(()),
            "a node alone takes it all"
        );
        let day_left = |q: &Quota| {
            let mut taken = 0;
            while q.take_alone(Priority::Client, 4).is_ok() {
                taken += 1;
                assert!(taken <= 100, "bounded");
            }
            taken
        };
        assert_eq!(day_left(&q), 0, "this minute is spent");
        // A new minute (and day) alone: 8 / 4 = 2.
        clock.advance(Duration::from_secs(60));
        assert_eq!(day_left(&q), 2);
        let (q, clock) = quota(0, 100);
        let ask = q.ask(Priority::Background).unwrap();
        assert_eq!(q.settle(&ask, counted), Ok(()));
        // The day: 40 + 60 / 4 = 55; background keeps 20 / 4 = 5 of it.
        let mut background = 0;
        while q.take_alone(Priority::Background, 4).is_ok() {
            background += 1;
            assert!(background <= 100, "bounded");
        }
        assert_eq!(background, 10);
        // Thrifty under half its share of the reserve (2.5 of 5): 3 left is not.
        for _ in 0..2 {
            assert_eq!(q.take_alone(Priority::Client, 4), Ok(()));
        }
        assert!(!q.is_thrifty_alone(4), "3 left of its share");
        assert!(!q.is_thrifty(), "48 left of the whole day");
        assert_eq!(q.take_alone(Priority::Client, 4), Ok(()));
        assert!(q.is_thrifty_alone(4), "2 left of its share");
        assert_eq!(day_left(&q), 2);
        // A new day alone: a quarter of it.
        clock.advance(Duration::from_secs(60));
        assert_eq!(day_left(&q), 25);
    }

    /// A clock stepped back across the minute's and the day's boundaries starts
    /// neither again: what was counted in the later window still counts.
    #[test]
    fn a_clock_stepped_back_does_not_start_the_quotas_again() {
        let (q, clock) = quota(3, 10);
        // 23:59:00, then 00:00:30 of the next vendor day: a new minute and day.
        clock.advance(Duration::from_secs(90));
        for _ in 0..3 {
            assert_eq!(q.take(Priority::Client), Ok(()));
        }
        // Stepped back 40 s: 23:59:50 of the day before.
        clock.set(cst("2026-03-02 23:59:50"));
        assert!(matches!(
            q.take(Priority::Client),
            Err(Exhausted::Minute { .. })
        ));
        assert_eq!(q.report().today, 3, "the later day's count kept");
        clock.set(cst("2026-03-03 00:01:00"));
        assert_eq!(q.take(Priority::Client), Ok(()));
        assert_eq!(q.report().today, 4);
    }

    #[test]
    fn a_day_starting_at_another_hour() {
        let (mut q, _) = quota(0, 5);
        q.settings.day_start = NaiveTime::from_hms_opt(8, 0, 0).unwrap();
        let (day, next) = q.day_of(cst("2026-03-03 07:59:00"));
        assert_eq!(day, NaiveDate::from_ymd_opt(2026, 3, 2).unwrap());
        assert_eq!(next, cst("2026-03-03 08:00:00"));
    }
}
