//! Simulated prices: daily closes and intraday quotes as deterministic random walks
//! (fractal value noise seeded by code, evaluated at any instant without replaying
//! history), K-lines with forward/backward adjustment, and quote snapshots; on the
//! simulated exchanges' own calendars and hours (the A-share holidays as published,
//! Hong Kong's and New York's sessions). The proxy's market clock is not used here.

use std::collections::HashSet;
use std::ops::RangeInclusive;
use std::sync::LazyLock;

use chrono::{DateTime, Datelike, Duration as Days, NaiveDate, Timelike, Utc, Weekday};
use chrono_tz::Asia::Shanghai;
use chrono_tz::Tz;

/// Seconds between two exchange snapshots (Level-1, docs/DOMAIN.md §3).
pub const SNAPSHOT_SECS: i64 = 3;

fn hash(seed: u64, i: i64) -> f64 {
    // splitmix64 of (seed, i), mapped to [-1, 1].
    let mut z = seed ^ (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 52) as f64 - 1.0
}

/// Smooth value noise in [-1, 1].
fn noise(seed: u64, x: f64) -> f64 {
    let i = x.floor();
    let t = x - i;
    let t = t * t * (3.0 - 2.0 * t);
    let i = i as i64;
    hash(seed, i) * (1.0 - t) + hash(seed, i + 1) * t
}

/// A Brownian-looking path: octaves of value noise whose amplitude grows with the
/// square root of their period, so the spread after n steps grows like sqrt(n).
fn walk(seed: u64, x: f64, octaves: u32, step_sigma: f64) -> f64 {
    (0..octaves)
        .map(|k| {
            let period = f64::from(1u32 << k);
            noise(seed.wrapping_add(u64::from(k) * 7919), x / period) * step_sigma * period.sqrt()
        })
        .sum()
}

/// A slowly varying value in (-1, 1) (macro series and the like): squashed with
/// `tanh` rather than clipped, so it never sticks at a bound for months.
pub fn smooth(seed: u64, x: f64) -> f64 {
    walk(seed, x, 4, 0.35).tanh()
}

/// The A-share weekday closures the exchanges publish (2024 to 2026, and 2027 as
/// announced provisionally), from the same list the proxy's calendar reads
/// (`mdproxy_market::holidays`). Earlier years are modelled without holidays.
static HOLIDAYS: LazyLock<HashSet<NaiveDate>> =
    LazyLock::new(|| mdproxy_market::holidays::published().collect());

/// A simulated exchange: its time zone, the hours its quotes move and the sessions
/// its minute bars cover, local time, in minutes from midnight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Venue {
    /// Shanghai, Shenzhen, Beijing: quotes move from the 09:15 call auction to 15:00;
    /// bars cover 09:30–11:30 and 13:00–15:00; the published holidays close it.
    China,
    /// Hong Kong: quotes move from 09:30 to 16:00; bars cover 09:30–12:00 and
    /// 13:00–16:00; every weekday (HK holidays are not modelled).
    HongKong,
    /// New York: 09:30–16:00 New York time, with its daylight saving; every weekday
    /// (US holidays are not modelled).
    NewYork,
}

impl Venue {
    fn zone(self) -> Tz {
        match self {
            Venue::China => Shanghai,
            Venue::HongKong => chrono_tz::Asia::Hong_Kong,
            Venue::NewYork => chrono_tz::America::New_York,
        }
    }

    /// When quotes move, seconds from local midnight.
    fn moving(self) -> (i64, i64) {
        match self {
            Venue::China => (9 * 3600 + 15 * 60, 15 * 3600),
            Venue::HongKong | Venue::NewYork => (9 * 3600 + 30 * 60, 16 * 3600),
        }
    }

    /// The sessions minute bars cover, minutes from local midnight.
    fn bar_sessions(self) -> &'static [(u32, u32)] {
        match self {
            Venue::China => &[(9 * 60 + 30, 11 * 60 + 30), (13 * 60, 15 * 60)],
            Venue::HongKong => &[(9 * 60 + 30, 12 * 60), (13 * 60, 16 * 60)],
            Venue::NewYork => &[(9 * 60 + 30, 16 * 60)],
        }
    }

    /// Whether it trades on `day` (its local date).
    pub fn trades_on(self, day: NaiveDate) -> bool {
        !matches!(day.weekday(), Weekday::Sat | Weekday::Sun)
            && (self != Venue::China || !HOLIDAYS.contains(&day))
    }

    /// Its local date at `now`.
    pub fn date(self, now: DateTime<Utc>) -> NaiveDate {
        now.with_timezone(&self.zone()).date_naive()
    }

    /// Its latest trading day on or before `day`.
    pub fn last_trading_day(self, mut day: NaiveDate) -> NaiveDate {
        while !self.trades_on(day) {
            day -= Days::days(1);
        }
        day
    }
}

/// Whether the simulated A-share exchanges trade on `day`: weekdays less the
/// published holidays.
pub fn is_trading_day(day: NaiveDate) -> bool {
    Venue::China.trades_on(day)
}

/// The latest A-share trading day on or before `day`.
pub fn last_trading_day(day: NaiveDate) -> NaiveDate {
    Venue::China.last_trading_day(day)
}

/// The continuous (backward-adjusted) close of a security on `day`.
fn adjusted_close(seed: u64, base: f64, day: NaiveDate) -> f64 {
    let x = f64::from(day.num_days_from_ce());
    base * walk(seed, x, 13, 0.012).exp()
}

/// The traded close of a security on `day` (any day: the path is defined on
/// weekends too), for what the companies report at a date.
pub fn close_on(sec: Security, day: NaiveDate) -> f64 {
    adjusted_close(sec.seed, sec.base_price, day) * dividend_factor(sec.seed, sec.listed, day)
}

/// Cumulative dividend factor up to and including `day`: one ex-dividend date a year
/// (in July), each paying 0.5–3 % of the price.
fn dividend_factor(seed: u64, listed: NaiveDate, day: NaiveDate) -> f64 {
    let mut f = 1.0;
    for year in (listed.year() + 1)..=day.year() {
        let ex = NaiveDate::from_ymd_opt(year, 7, 1 + (seed % 20) as u32).expect("a July date");
        if ex <= day {
            f *= 1.0 - (0.005 + 0.025 * (hash(seed, i64::from(year)) + 1.0) / 2.0);
        }
    }
    f
}

/// Price adjustment of K-lines (`fqt`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Adjust {
    /// Forward-adjusted (`pre`): history rescaled so the latest bar equals the traded price.
    Pre,
    /// Backward-adjusted (`after`, or the older spelling `post`): a continuous series
    /// from listing.
    After,
    /// Prices as traded (`none`).
    None,
}

impl Adjust {
    /// The `fqt` values the upstream accepts, in the order of its docs.
    pub const FQT: [&str; 4] = ["pre", "after", "post", "none"];

    /// From the API's `fqt` value (one of [`Adjust::FQT`], any case).
    pub fn from_fqt(fqt: &str) -> Option<Adjust> {
        match fqt.to_ascii_lowercase().as_str() {
            "pre" => Some(Adjust::Pre),
            "after" | "post" => Some(Adjust::After),
            "none" => Some(Adjust::None),
            _ => None,
        }
    }
}

/// One OHLCV bar.
#[derive(Clone, Copy, Debug)]
struct Bar {
    day: NaiveDate,
    open: f64,
    close: f64,
    high: f64,
    low: f64,
    volume: f64,
    pre_close: f64,
}

/// Identity of a priced security.
#[derive(Clone, Copy, Debug)]
pub struct Security {
    pub seed: u64,
    pub base_price: f64,
    pub listed: NaiveDate,
    /// Shares outstanding in units of 10,000 (for turnover).
    pub shares_wan: f64,
}

/// Daily bars from listing to `today`, with adjustment `adj`, on the days `venue`
/// trades.
fn daily_bars(venue: Venue, sec: Security, today: NaiveDate, adj: Adjust) -> Vec<Bar> {
    let latest_factor = dividend_factor(sec.seed, sec.listed, today);
    let mut bars = Vec::with_capacity(9_000);
    let mut day = sec.listed;
    let mut prev = None;
    while day <= today {
        // Weekends closed; about one day in 150 suspended.
        if venue.trades_on(day)
            && hash(sec.seed ^ 0x5359, i64::from(day.num_days_from_ce())) > -0.987
        {
            let x = i64::from(day.num_days_from_ce());
            // Traded price = continuous path × dividends paid so far. Backward
            // adjustment is the continuous path; forward adjustment scales the path so
            // that the latest bar equals the traded price.
            let factor = match adj {
                Adjust::After => 1.0,
                Adjust::None => dividend_factor(sec.seed, sec.listed, day),
                Adjust::Pre => latest_factor,
            };
            let close = adjusted_close(sec.seed, sec.base_price, day) * factor;
            let pre_close = prev.unwrap_or(close * (1.0 - 0.01 * hash(sec.seed ^ 1, x)));
            let open = pre_close * (1.0 + 0.01 * hash(sec.seed ^ 2, x));
            let high = open.max(close) * (1.0 + 0.012 * (hash(sec.seed ^ 3, x) + 1.0) / 2.0);
            let low = open.min(close) * (1.0 - 0.012 * (hash(sec.seed ^ 4, x) + 1.0) / 2.0);
            let volume =
                sec.shares_wan * 100.0 * (0.004 + 0.02 * (hash(sec.seed ^ 5, x) + 1.0) / 2.0);
            bars.push(Bar {
                day,
                open,
                close,
                high,
                low,
                volume,
                pre_close,
            });
            prev = Some(close);
        }
        day += Days::days(1);
    }
    bars
}

/// Merges daily bars into weekly or monthly ones.
fn merge(bars: &[Bar], same: impl Fn(NaiveDate, NaiveDate) -> bool) -> Vec<Bar> {
    let mut out: Vec<Bar> = Vec::new();
    for bar in bars {
        match out.last_mut() {
            Some(last) if same(last.day, bar.day) => {
                last.day = bar.day;
                last.close = bar.close;
                last.high = last.high.max(bar.high);
                last.low = last.low.min(bar.low);
                last.volume += bar.volume;
            }
            _ => out.push(*bar),
        }
    }
    for i in 1..out.len() {
        out[i].pre_close = out[i - 1].close;
    }
    out
}

/// K-line rows in Eastmoney's order: date, open, close, high, low, volume (lots),
/// amount, amplitude %, change %, change, turnover %, prices with `decimals` places;
/// only bars dated inside `range` (a week or month is dated by its last trading day).
pub fn kline_rows(
    venue: Venue,
    sec: Security,
    today: NaiveDate,
    period: &str,
    adj: Adjust,
    range: RangeInclusive<NaiveDate>,
    decimals: usize,
) -> Vec<String> {
    let daily = daily_bars(venue, sec, today, adj);
    let bars = match period {
        "week" => merge(&daily, |a, b| a.iso_week() == b.iso_week()),
        "month" => merge(&daily, |a, b| {
            a.year() == b.year() && a.month() == b.month()
        }),
        _ => daily,
    };
    bars.iter()
        .filter(|b| range.contains(&b.day))
        .map(|b| {
            let lots = (b.volume / 100.0).round();
            let amount = b.volume * (b.open + b.close) / 2.0;
            let chg = b.close - b.pre_close;
            let p = decimals;
            format!(
                "{},{:.p$},{:.p$},{:.p$},{:.p$},{lots},{amount:.2},{:.2},{:.2},{chg:.p$},{:.2}",
                b.day,
                b.open,
                b.close,
                b.high,
                b.low,
                (b.high - b.low) / b.pre_close * 100.0,
                chg / b.pre_close * 100.0,
                b.volume / (sec.shares_wan * 10_000.0) * 100.0,
            )
        })
        .collect()
}

/// Minute bars of `minutes` (1, 5, 15, 30 or 60) over the days in `days` that `venue`
/// trades, inside its sessions, up to `now` (the last bar of a session in progress
/// moves with the quote), labelled by their end in the venue's local time,
/// `YYYY-MM-DD HH:MM`, in the daily rows' format. (Whether the upstream labels US bars
/// in New York or China time is undocumented; New York's is the guess.)
pub fn minute_rows(
    venue: Venue,
    sec: Security,
    limit: f64,
    now: DateTime<Utc>,
    minutes: u32,
    days: RangeInclusive<NaiveDate>,
    decimals: usize,
) -> Vec<String> {
    let mut rows = Vec::new();
    let mut day = *days.start();
    let p = decimals;
    while day <= *days.end() {
        if venue.trades_on(day) {
            for &(start, end) in venue.bar_sessions() {
                let mut t = start;
                while t < end {
                    let bar_end = (t + minutes).min(end);
                    let at = |m: u32| {
                        day.and_hms_opt(m / 60, m % 60, 0)
                            .and_then(|l| l.and_local_timezone(venue.zone()).earliest())
                            .map(|l| l.with_timezone(&Utc))
                    };
                    let (Some(open_at), Some(close_at)) = (at(t), at(bar_end)) else {
                        break;
                    };
                    if open_at >= now {
                        break;
                    }
                    let first = quote_at(venue, sec, limit, open_at);
                    let last = quote_at(venue, sec, limit, close_at.min(now));
                    let mid = quote_at(
                        venue,
                        sec,
                        limit,
                        open_at + (close_at.min(now) - open_at) / 2,
                    );
                    let high = first.price.max(last.price).max(mid.price);
                    let low = first.price.min(last.price).min(mid.price);
                    let volume = (last.volume - first.volume).max(0.0);
                    let lots = (volume / 100.0).round();
                    let amount = volume * (first.price + last.price) / 2.0;
                    let chg = last.price - first.price;
                    rows.push(format!(
                        "{} {:02}:{:02},{:.p$},{:.p$},{high:.p$},{low:.p$},{lots},{amount:.2},{:.2},{:.2},{chg:.p$},{:.2}",
                        day,
                        bar_end / 60,
                        bar_end % 60,
                        first.price,
                        last.price,
                        (high - low) / first.price * 100.0,
                        chg / first.price * 100.0,
                        volume / (sec.shares_wan * 10_000.0) * 100.0,
                    ));
                    t = bar_end;
                }
            }
        }
        day += Days::days(1);
    }
    rows
}

/// The local trading date at `now` and the seconds into it, clamped to the hours the
/// venue's quotes move (they stand still outside them).
fn session_position(venue: Venue, now: DateTime<Utc>) -> (NaiveDate, i64) {
    let local = now.with_timezone(&venue.zone());
    let secs = i64::from(local.time().num_seconds_from_midnight());
    let (open, close) = venue.moving();
    (local.date_naive(), secs.clamp(open, close))
}

/// A real-time quote snapshot of one A-share security at `now`.
pub fn quote(sec: Security, limit: f64, now: DateTime<Utc>) -> Quote {
    quote_at(Venue::China, sec, limit, now)
}

/// A real-time quote snapshot of one security of `venue` at `now`.
pub fn quote_at(venue: Venue, sec: Security, limit: f64, now: DateTime<Utc>) -> Quote {
    let (day, secs) = session_position(venue, now);
    let prev_day = venue.last_trading_day(day - Days::days(1));
    let pre_close = adjusted_close(sec.seed, sec.base_price, prev_day)
        * dividend_factor(sec.seed, sec.listed, prev_day);
    // Snapshot index within the day; the walk restarts each day from the previous close.
    let step = (secs - venue.moving().0) / SNAPSHOT_SECS;
    let day_seed = sec.seed ^ (day.num_days_from_ce() as u64).wrapping_mul(0x2545_F491);
    let move_at = |s: i64| walk(day_seed, s as f64, 12, 0.0009).clamp(-limit, limit);
    let pct = move_at(step);
    let price = pre_close * (1.0 + pct);
    let open = pre_close * (1.0 + move_at(100));
    // High and low so far: sample the path coarsely (cheap, and consistent over time).
    let (mut high, mut low) = (open.max(price), open.min(price));
    let mut s = 100;
    while s < step {
        let p = pre_close * (1.0 + move_at(s));
        high = high.max(p);
        low = low.min(p);
        s += 200;
    }
    let progress = (step as f64 / 4_700.0).clamp(0.0, 1.0);
    let volume = sec.shares_wan * 100.0 * 0.012 * progress * (1.2 + hash(day_seed, 1) * 0.5);
    Quote {
        price,
        pre_close,
        open,
        high,
        low,
        volume,
        amount: volume * (open + price) / 2.0,
        turnover: volume / (sec.shares_wan * 10_000.0) * 100.0,
        tick: now.timestamp() / SNAPSHOT_SECS,
    }
}

/// A quote snapshot.
#[derive(Clone, Copy, Debug)]
pub struct Quote {
    pub price: f64,
    pub pre_close: f64,
    pub open: f64,
    pub high: f64,
    pub low: f64,
    /// Shares.
    pub volume: f64,
    pub amount: f64,
    pub turnover: f64,
    /// Snapshot number (changes every [`SNAPSHOT_SECS`]).
    pub tick: i64,
}

impl Quote {
    /// Change in percent.
    pub fn pct(&self) -> f64 {
        (self.price / self.pre_close - 1.0) * 100.0
    }
}

/// The trading date at `now`, China time.
pub fn trading_date(now: DateTime<Utc>) -> NaiveDate {
    Venue::China.date(now)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sec() -> Security {
        Security {
            seed: 42,
            base_price: 10.0,
            listed: NaiveDate::from_ymd_opt(1991, 4, 3).unwrap(),
            shares_wan: 100_000.0,
        }
    }

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn old_stocks_have_thousands_of_daily_rows() {
        let today = NaiveDate::from_ymd_opt(2026, 11, 20).unwrap();
        let all = NaiveDate::MIN..=today;
        let rows = kline_rows(
            Venue::China,
            sec(),
            today,
            "day",
            Adjust::Pre,
            all.clone(),
            2,
        );
        assert!(rows.len() > 8_000, "{}", rows.len());
        assert!(rows[0].starts_with("1991-04-03,"));
        let bytes: usize = rows.iter().map(String::len).sum();
        assert!(bytes > 500_000, "{bytes}");
        let weeks = kline_rows(
            Venue::China,
            sec(),
            today,
            "week",
            Adjust::Pre,
            all.clone(),
            2,
        );
        let months = kline_rows(Venue::China, sec(), today, "month", Adjust::Pre, all, 2);
        assert!(weeks.len() < rows.len() / 4 && months.len() < weeks.len() / 4);
    }

    #[test]
    fn forward_adjustment_matches_traded_price_at_the_end() {
        let today = NaiveDate::from_ymd_opt(2026, 11, 20).unwrap();
        let all = || NaiveDate::MIN..=today;
        let pre = kline_rows(Venue::China, sec(), today, "day", Adjust::Pre, all(), 2);
        let none = kline_rows(Venue::China, sec(), today, "day", Adjust::None, all(), 2);
        let after = kline_rows(Venue::China, sec(), today, "day", Adjust::After, all(), 2);
        assert_eq!(pre.last(), none.last());
        assert_ne!(pre.first(), none.first());
        assert_ne!(after.last(), none.last());
        assert_eq!(Adjust::from_fqt("post"), Adjust::from_fqt("AFTER"));
        assert_eq!(Adjust::from_fqt("qfq"), None);
    }

    #[test]
    fn a_date_range_keeps_only_the_bars_inside_it() {
        let today = NaiveDate::from_ymd_opt(2026, 11, 20).unwrap();
        let from = NaiveDate::from_ymd_opt(2024, 1, 1).unwrap();
        let to = NaiveDate::from_ymd_opt(2024, 1, 31).unwrap();
        let rows = kline_rows(Venue::China, sec(), today, "day", Adjust::Pre, from..=to, 2);
        assert!((18..=23).contains(&rows.len()), "{}", rows.len());
        assert!(rows.iter().all(|r| r.starts_with("2024-01-")));
    }

    #[test]
    fn quotes_move_in_session_and_stand_still_after_close() {
        let a = quote(sec(), 0.1, at("2026-11-20T02:00:00Z")); // 10:00 CST, Friday
        let b = quote(sec(), 0.1, at("2026-11-20T02:10:00Z"));
        assert_ne!(a.price, b.price);
        assert!(a.pct().abs() <= 10.0 + 1e-9);
        let c = quote(sec(), 0.1, at("2026-11-20T08:00:00Z")); // 16:00 CST
        let d = quote(sec(), 0.1, at("2026-11-20T10:00:00Z"));
        assert_eq!(c.price, d.price);
        let same = quote(sec(), 0.1, at("2026-11-20T02:00:00Z"));
        assert_eq!(a.price, same.price);
    }
}
