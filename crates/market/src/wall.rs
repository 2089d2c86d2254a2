//! The wall clock read as a UTC `DateTime`, the day's date made once a day on each
//! thread: chrono's `Utc::now` works the calendar out at every read, about 110 of
//! the 200 instructions a read cost, and the cache reads the clock once on a hit
//! and three times on a miss (docs/BENCHMARKS.md, instructions per miss).

use std::cell::Cell;
use std::time::{SystemTime, UNIX_EPOCH};

use chrono::{DateTime, NaiveDate, NaiveTime, Utc};

const DAY_SECS: u64 = 86_400;

/// Now, as [`Utc::now`] gives it.
pub(crate) fn now() -> DateTime<Utc> {
    match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(since) => at(since.as_secs(), since.subsec_nanos()),
        // A clock set before 1970: chrono's own way.
        Err(_) => Utc::now(),
    }
}

/// The time `secs` and `nanos` after the Unix epoch (`nanos` under a second).
fn at(secs: u64, nanos: u32) -> DateTime<Utc> {
    thread_local! {
        /// The last day asked on this thread (days since the epoch) and its date.
        static DAY: Cell<(u64, NaiveDate)> = const { Cell::new((u64::MAX, NaiveDate::MIN)) };
    }
    let (day, second) = (secs / DAY_SECS, (secs % DAY_SECS) as u32);
    let date = DAY.with(|cached| {
        let (seen, date) = cached.get();
        if seen == day {
            return Some(date);
        }
        let start = DateTime::from_timestamp(i64::try_from(day * DAY_SECS).ok()?, 0)?;
        cached.set((day, start.date_naive()));
        Some(start.date_naive())
    });
    let time = NaiveTime::from_num_seconds_from_midnight_opt(second, nanos);
    match date.zip(time) {
        Some((date, time)) => date.and_time(time).and_utc(),
        // Past chrono's calendar, or a leap second's nanoseconds: chrono's own way.
        None => Utc::now(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The cached date gives what chrono's conversion gives, across days (either
    /// way, as threads see them), at their edges, and far from now.
    #[test]
    fn the_same_as_chronos_conversion() {
        let cases = [
            (0, 0),
            (86_399, 999_999_999),
            (86_400, 0),
            (1_764_547_199, 500),
            (1_764_547_200, 0),
            (1_764_547_199, 0),
            (4_102_444_800, 1),
            (1_700_000_000, 123_456_789),
        ];
        for (secs, nanos) in cases {
            let chrono = DateTime::from_timestamp(secs as i64, nanos).unwrap();
            assert_eq!(at(secs, nanos), chrono, "{secs}.{nanos:09}");
        }
        let (before, got, after) = (Utc::now(), now(), Utc::now());
        assert!(before <= got && got <= after);
    }
}
