//! The market clocks: the A-share sessions and holiday calendar in China Standard Time
//! ("is the market in session", "when does the next session open", "when did the last
//! one close"), the sessions of Hong Kong and New York for HK and US codes
//! ([`Venue`]), and the injectable wall clock ([`Clock`]) everything reads.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Datelike, Duration, NaiveDate, NaiveTime, TimeZone, Utc, Weekday};
use chrono_tz::Asia::Shanghai;
use chrono_tz::Tz;

pub mod holidays;
mod wall;

/// The sessions of a trading day, China time: the morning (opening call auction from
/// 09:15, continuous trading 09:30–11:30) and the afternoon (13:00–15:00, with the
/// closing auction from 14:57). The lunch break counts as closed: quotes stand still.
const SESSIONS: [(u32, u32, u32, u32); 2] = [(9, 15, 11, 30), (13, 0, 15, 0)];

/// The sessions of the Hong Kong exchange, Hong Kong time (UTC+8, as China): the
/// pre-opening auction and the morning session 09:00–12:00, the afternoon session
/// with the closing auction 13:00–16:10. As with the A-share table, the auctions
/// count: they set the opening and closing prices.
const HK_SESSIONS: [(u32, u32, u32, u32); 2] = [(9, 0, 12, 0), (13, 0, 16, 10)];

/// The regular session of the New York exchanges (NYSE, NASDAQ), New York time, with
/// its daylight saving: 09:30–16:00. Pre- and after-market trading are not in the
/// K-lines.
const US_SESSIONS: [(u32, u32, u32, u32); 1] = [(9, 30, 16, 0)];

/// The market an answer's data comes from, and so whose sessions decide its
/// freshness: the A-share market for nearly everything, Hong Kong for HK codes and
/// lists, New York for US secids.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Venue {
    /// Shanghai, Shenzhen and Beijing: the sessions and holidays above.
    #[default]
    China,
    /// Hong Kong: its sessions on every weekday (its holidays are not built in: on
    /// one, answers simply keep their in-session lifetimes).
    HongKong,
    /// New York: its regular session on every weekday, in New York time (its
    /// holidays are not built in either).
    NewYork,
}

impl Venue {
    /// Every venue, in the order of their stored tags.
    pub const ALL: [Venue; 3] = [Venue::China, Venue::HongKong, Venue::NewYork];

    /// Stable label.
    pub fn as_str(self) -> &'static str {
        match self {
            Venue::China => "china",
            Venue::HongKong => "hong_kong",
            Venue::NewYork => "new_york",
        }
    }

    /// The venue's time zone.
    pub fn zone(self) -> Tz {
        match self {
            Venue::China => Shanghai,
            Venue::HongKong => chrono_tz::Asia::Hong_Kong,
            Venue::NewYork => chrono_tz::America::New_York,
        }
    }

    fn sessions(self) -> &'static [(u32, u32, u32, u32)] {
        match self {
            Venue::China => &SESSIONS,
            Venue::HongKong => &HK_SESSIONS,
            Venue::NewYork => &US_SESSIONS,
        }
    }

    /// The date where the venue trades at `t` (a US range settles on the New York
    /// date, not the China one).
    pub fn date(self, t: DateTime<Utc>) -> NaiveDate {
        t.with_timezone(&self.zone()).date_naive()
    }
}

/// Phase of the market at an instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Inside a session (call auction or continuous trading).
    Open,
    /// A trading day, outside its sessions (before the open, lunch, after the close).
    Break,
    /// A weekend or an exchange holiday.
    Closed,
}

impl Phase {
    /// Stable label.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Open => "open",
            Phase::Break => "break",
            Phase::Closed => "closed",
        }
    }
}

/// The trading calendar.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Calendar {
    holidays: BTreeSet<NaiveDate>,
    /// Years the holiday list covers; outside them only weekends are known.
    years: BTreeSet<i32>,
}

impl Default for Calendar {
    fn default() -> Self {
        Calendar::builtin()
    }
}

impl Calendar {
    /// The built-in calendar: 2026 as published, 2027 provisional.
    pub fn builtin() -> Calendar {
        Calendar::from_dates(holidays::published())
    }

    /// A calendar closing exactly `dates` (plus every weekend).
    pub fn from_dates(dates: impl IntoIterator<Item = NaiveDate>) -> Calendar {
        let holidays: BTreeSet<NaiveDate> = dates.into_iter().collect();
        let years = holidays.iter().map(Datelike::year).collect();
        Calendar { holidays, years }
    }

    /// Parses `YYYY-MM-DD` strings (config); errors name the bad entry.
    ///
    /// # Errors
    /// The first entry that is not a real date.
    pub fn parse(dates: &[String]) -> Result<Calendar, String> {
        let parsed = dates
            .iter()
            .map(|d| {
                NaiveDate::parse_from_str(d, "%Y-%m-%d")
                    .map_err(|_| format!("{d:?} is not a date written YYYY-MM-DD"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Calendar::from_dates(parsed))
    }

    /// True when the holiday list covers `year` (a proxy should warn when it does not).
    pub fn covers(&self, year: i32) -> bool {
        self.years.contains(&year)
    }

    /// Whether the exchanges trade on `day` (weekends are always closed, including
    /// official make-up working days).
    pub fn is_trading_day(&self, day: NaiveDate) -> bool {
        self.trades_on(Venue::China, day)
    }

    /// Whether `venue` trades on `day` (its own date): weekdays, less the A-share
    /// holidays for China.
    fn trades_on(&self, venue: Venue, day: NaiveDate) -> bool {
        !matches!(day.weekday(), Weekday::Sat | Weekday::Sun)
            && (venue != Venue::China || !self.holidays.contains(&day))
    }

    /// The phase at `t`.
    pub fn phase(&self, t: DateTime<Utc>) -> Phase {
        self.phase_of(Venue::China, t)
    }

    /// The phase of `venue` at `t`.
    pub fn phase_of(&self, venue: Venue, t: DateTime<Utc>) -> Phase {
        let local = t.with_timezone(&venue.zone());
        if !self.trades_on(venue, local.date_naive()) {
            return Phase::Closed;
        }
        let time = local.time();
        let open = venue
            .sessions()
            .iter()
            .any(|&(h1, m1, h2, m2)| time >= hm(h1, m1) && time < hm(h2, m2));
        if open { Phase::Open } else { Phase::Break }
    }

    /// Whether the market is in session at `t`.
    pub fn is_open(&self, t: DateTime<Utc>) -> bool {
        self.phase(t) == Phase::Open
    }

    /// Whether `venue` is in session at `t`.
    pub fn is_open_at(&self, venue: Venue, t: DateTime<Utc>) -> bool {
        self.phase_of(venue, t) == Phase::Open
    }

    /// The first session start strictly after `t`.
    ///
    /// ```
    /// use chrono::{DateTime, Utc};
    /// let cal = mdproxy_market::Calendar::builtin();
    /// // Friday 6 March 2026, 16:00 China time (08:00 UTC) -> Monday 09:15 China time.
    /// let friday: DateTime<Utc> = "2026-03-06T08:00:00Z".parse().unwrap();
    /// assert!(!cal.is_open(friday));
    /// assert_eq!(cal.next_open(friday).to_rfc3339(), "2026-03-09T01:15:00+00:00");
    /// ```
    pub fn next_open(&self, t: DateTime<Utc>) -> DateTime<Utc> {
        self.next_open_at(Venue::China, t)
    }

    /// The first session start of `venue` strictly after `t`.
    ///
    /// ```
    /// use chrono::{DateTime, Utc};
    /// use mdproxy_market::{Calendar, Venue};
    /// let cal = Calendar::builtin();
    /// // Monday 2 March 2026, 15:30 China time: New York opens at 09:30 EST, 14:30 UTC.
    /// let t: DateTime<Utc> = "2026-03-02T07:30:00Z".parse().unwrap();
    /// assert_eq!(cal.next_open_at(Venue::NewYork, t).to_rfc3339(), "2026-03-02T14:30:00+00:00");
    /// // After the switch to daylight saving time (8 March), 13:30 UTC.
    /// let t: DateTime<Utc> = "2026-03-09T07:30:00Z".parse().unwrap();
    /// assert_eq!(cal.next_open_at(Venue::NewYork, t).to_rfc3339(), "2026-03-09T13:30:00+00:00");
    /// ```
    pub fn next_open_at(&self, venue: Venue, t: DateTime<Utc>) -> DateTime<Utc> {
        let mut day = venue.date(t);
        // Holidays never run longer than a few weeks; bound the search anyway.
        for _ in 0..400 {
            if self.trades_on(venue, day) {
                for &(h, m, _, _) in venue.sessions() {
                    let start = at(venue, day, h, m);
                    if start > t {
                        return start;
                    }
                }
            }
            day += Duration::days(1);
        }
        t + Duration::days(400)
    }

    /// The last session end at or before `t` (the close that made today's or the
    /// previous trading day's data final).
    pub fn last_close(&self, t: DateTime<Utc>) -> DateTime<Utc> {
        let mut day = t.with_timezone(&Shanghai).date_naive();
        for _ in 0..400 {
            if self.is_trading_day(day) {
                for &(_, _, h, m) in SESSIONS.iter().rev() {
                    let end = at(Venue::China, day, h, m);
                    if end <= t {
                        return end;
                    }
                }
            }
            day -= Duration::days(1);
        }
        t - Duration::days(400)
    }
}

fn hm(h: u32, m: u32) -> NaiveTime {
    NaiveTime::from_hms_opt(h, m, 0).expect("session times are valid")
}

/// `day` at `h:m` in `venue`'s time, as UTC. Sessions never start or end inside a
/// daylight-saving gap or overlap (New York's change at 02:00), so the local time is
/// one instant.
fn at(venue: Venue, day: NaiveDate, h: u32, m: u32) -> DateTime<Utc> {
    venue
        .zone()
        .from_local_datetime(&day.and_time(hm(h, m)))
        .earliest()
        .expect("session times are never in a daylight-saving gap")
        .with_timezone(&Utc)
}

/// `2026-03-02 10:00` or `2026-03-02 10:00:05`, China time, as UTC (tests).
/// A source of "now". Tests use [`ManualClock`] so that no test sleeps real minutes.
pub trait Clock: Send + Sync + 'static {
    /// The current instant.
    fn now(&self) -> DateTime<Utc>;
}

/// The system's wall clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        wall::now()
    }
}

/// A clock that moves only when told to.
#[derive(Debug)]
pub struct ManualClock {
    now: Mutex<DateTime<Utc>>,
}

impl ManualClock {
    /// A clock standing at `start`.
    pub fn new(start: DateTime<Utc>) -> Arc<ManualClock> {
        Arc::new(ManualClock {
            now: Mutex::new(start),
        })
    }

    /// Moves the clock forward.
    pub fn advance(&self, by: std::time::Duration) {
        let mut now = self.now.lock().expect("clock lock is never poisoned");
        *now += chrono::Duration::from_std(by).expect("test durations are small");
    }

    /// Sets the clock.
    pub fn set(&self, to: DateTime<Utc>) {
        *self.now.lock().expect("clock lock is never poisoned") = to;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        *self.now.lock().expect("clock lock is never poisoned")
    }
}

/// A clock that runs `factor` times faster than tokio's from `start`: a day of
/// traffic replayed in minutes, or a test's minutes in seconds. Its
/// [`rate_clock`](ScaledClock::rate_clock) runs alike, so the upstream budget, the
/// pauses and the adaptive rate keep the same time as the market and the simulator.
#[derive(Debug)]
pub struct ScaledClock {
    start: DateTime<Utc>,
    origin: tokio::time::Instant,
    factor: f64,
    /// Added by [`advance`](ScaledClock::advance): a jump over idle hours.
    jumped: Mutex<chrono::Duration>,
}

impl ScaledClock {
    /// A clock at `start` now, running `factor` times faster than real time.
    pub fn new(start: DateTime<Utc>, factor: f64) -> Arc<ScaledClock> {
        Arc::new(ScaledClock {
            start,
            origin: tokio::time::Instant::now(),
            factor,
            jumped: Mutex::new(chrono::Duration::zero()),
        })
    }

    /// The tokio instant it started at, and how many times faster than real time
    /// it runs (the rate clock runs alike: `RateClock::following`).
    pub fn origin_and_factor(&self) -> (tokio::time::Instant, f64) {
        (self.origin, self.factor)
    }

    /// Jumps the market time forward (the rate clock does not jump).
    pub fn advance(&self, by: std::time::Duration) {
        *self.jumped.lock().expect("clock lock is never poisoned") +=
            chrono::Duration::from_std(by).expect("jumps are small");
    }

    /// How long `d` of this clock's time lasts in real time.
    pub fn to_real(&self, d: std::time::Duration) -> std::time::Duration {
        d.div_f64(self.factor)
    }
}

impl Clock for ScaledClock {
    fn now(&self) -> DateTime<Utc> {
        let run = self.origin.elapsed().mul_f64(self.factor);
        let jumped = *self.jumped.lock().expect("clock lock is never poisoned");
        self.start + chrono::Duration::from_std(run).expect("a run lasts less than years") + jumped
    }
}

/// The instant of a China Standard Time wall clock reading, `2026-03-09 09:30` or
/// `2026-03-09 09:30:15`: how tests and examples name a moment of the market's day.
///
/// # Panics
/// When `s` is not such a reading.
pub fn cst(s: &str) -> DateTime<Utc> {
    let naive = chrono::NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S")
        .or_else(|_| chrono::NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M"))
        .expect("a China time");
    Shanghai
        .from_local_datetime(&naive)
        .single()
        .expect("no DST in China")
        .with_timezone(&Utc)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_of_a_trading_day() {
        let c = Calendar::builtin();
        // Monday 2 March 2026.
        assert_eq!(c.phase(cst("2026-03-02 09:14")), Phase::Break);
        assert_eq!(c.phase(cst("2026-03-02 09:15")), Phase::Open);
        assert_eq!(c.phase(cst("2026-03-02 11:29")), Phase::Open);
        assert_eq!(c.phase(cst("2026-03-02 11:30")), Phase::Break);
        assert_eq!(c.phase(cst("2026-03-02 13:00")), Phase::Open);
        assert_eq!(c.phase(cst("2026-03-02 14:59")), Phase::Open);
        assert_eq!(c.phase(cst("2026-03-02 15:00")), Phase::Break);
    }

    #[test]
    fn weekends_and_holidays_are_closed() {
        let c = Calendar::builtin();
        assert_eq!(c.phase(cst("2026-03-07 10:00")), Phase::Closed); // Saturday
        assert_eq!(c.phase(cst("2026-10-05 10:00")), Phase::Closed); // National Day
        assert_eq!(c.phase(cst("2026-02-14 10:00")), Phase::Closed); // make-up Saturday: still closed
        assert!(c.covers(2026) && c.covers(2027) && !c.covers(2028));
    }

    #[test]
    fn next_open_and_last_close() {
        let c = Calendar::builtin();
        // (now, next open, last close), China time.
        let cases = [
            // Friday after the close -> Monday 09:15.
            ("2026-03-06 15:30", "2026-03-09 09:15", "2026-03-06 15:00"),
            // Lunch -> 13:00 the same day.
            ("2026-03-02 12:00", "2026-03-02 13:00", "2026-03-02 11:30"),
            // In the morning session -> the afternoon session; last close is Friday's.
            ("2026-03-02 10:00", "2026-03-02 13:00", "2026-02-27 15:00"),
            // Before National Day -> Thursday 8 October.
            ("2026-09-30 16:00", "2026-10-08 09:15", "2026-09-30 15:00"),
            // Monday before the open -> Friday's close.
            ("2026-03-09 09:00", "2026-03-09 09:15", "2026-03-06 15:00"),
        ];
        for (now, open, close) in cases {
            assert_eq!(c.next_open(cst(now)), cst(open), "next open after {now}");
            assert_eq!(
                c.last_close(cst(now)),
                cst(close),
                "last close before {now}"
            );
        }
    }

    /// Hong Kong trades until 12:00 and from 13:00 to 16:10 (closing auction), on
    /// China's clock; New York 09:30–16:00 on its own, through daylight saving.
    #[test]
    fn hong_kong_and_new_york_keep_their_own_sessions() {
        let c = Calendar::builtin();
        let hk = |t| c.phase_of(Venue::HongKong, cst(t));
        assert_eq!(hk("2026-03-02 11:45"), Phase::Open);
        assert_eq!(hk("2026-03-02 12:30"), Phase::Break);
        assert_eq!(hk("2026-03-02 15:30"), Phase::Open, "A-shares are closed");
        assert_eq!(hk("2026-03-02 16:09"), Phase::Open);
        assert_eq!(hk("2026-03-02 16:10"), Phase::Break);
        assert_eq!(hk("2026-03-07 10:00"), Phase::Closed);
        assert_eq!(
            c.next_open_at(Venue::HongKong, cst("2026-03-02 16:30")),
            cst("2026-03-03 09:00")
        );
        let ny = |t| c.phase_of(Venue::NewYork, cst(t));
        // Monday 2 March (EST, UTC-5): 22:30 to 05:00 China time.
        assert_eq!(ny("2026-03-02 22:29"), Phase::Break);
        assert_eq!(ny("2026-03-02 22:30"), Phase::Open);
        assert_eq!(ny("2026-03-03 04:59"), Phase::Open);
        assert_eq!(ny("2026-03-03 05:00"), Phase::Break);
        // Monday 9 March (EDT, UTC-4): 21:30 to 04:00 China time.
        assert_eq!(ny("2026-03-09 21:30"), Phase::Open);
        assert_eq!(ny("2026-03-10 04:00"), Phase::Break);
        // Saturday morning in China is Friday's session in New York.
        assert_eq!(ny("2026-03-07 03:00"), Phase::Open);
        assert_eq!(ny("2026-03-07 22:30"), Phase::Closed);
        assert_eq!(
            c.next_open_at(Venue::NewYork, cst("2026-03-07 12:00")),
            cst("2026-03-09 21:30"),
            "Monday, the first day of daylight saving"
        );
        assert_eq!(
            Venue::NewYork.date(cst("2026-03-03 00:30")).to_string(),
            "2026-03-02"
        );
        // A-share holidays are China's alone.
        assert_eq!(
            c.phase_of(Venue::HongKong, cst("2026-10-05 10:00")),
            Phase::Open
        );
    }

    #[test]
    fn calendars_parse_from_config() {
        let c = Calendar::parse(&["2030-01-01".to_owned()]).unwrap();
        assert!(!c.is_trading_day(NaiveDate::from_ymd_opt(2030, 1, 1).unwrap()));
        assert!(c.is_trading_day(NaiveDate::from_ymd_opt(2026, 1, 2).unwrap()));
        assert!(Calendar::parse(&["2030-02-30".to_owned()]).is_err());
    }
}
