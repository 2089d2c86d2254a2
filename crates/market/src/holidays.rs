//! The A-share market's weekday closures, year by year, as the exchanges publish
//! them: one list that the proxy's calendar and the simulated upstream both read.

use chrono::NaiveDate;

/// Weekday closures of 2024, as the exchanges' notice published them.
const HOLIDAYS_2024: &[&str] = &[
    "2024-01-01",
    "2024-02-09",
    "2024-02-12",
    "2024-02-13",
    "2024-02-14",
    "2024-02-15",
    "2024-02-16",
    "2024-04-04",
    "2024-04-05",
    "2024-05-01",
    "2024-05-02",
    "2024-05-03",
    "2024-06-10",
    "2024-09-16",
    "2024-09-17",
    "2024-10-01",
    "2024-10-02",
    "2024-10-03",
    "2024-10-04",
    "2024-10-07",
];

/// Weekday closures of 2025, as the exchanges' notice published them.
const HOLIDAYS_2025: &[&str] = &[
    "2025-01-01",
    "2025-01-28",
    "2025-01-29",
    "2025-01-30",
    "2025-01-31",
    "2025-02-03",
    "2025-02-04",
    "2025-04-04",
    "2025-05-01",
    "2025-05-02",
    "2025-05-05",
    "2025-06-02",
    "2025-10-01",
    "2025-10-02",
    "2025-10-03",
    "2025-10-06",
    "2025-10-07",
    "2025-10-08",
];

/// Weekday closures of 2026, from the exchanges' notice of 2025-12-22 (docs/DOMAIN.md §1.2).
const HOLIDAYS_2026: &[&str] = &[
    "2026-01-01",
    "2026-01-02",
    "2026-02-16",
    "2026-02-17",
    "2026-02-18",
    "2026-02-19",
    "2026-02-20",
    "2026-02-23",
    "2026-04-06",
    "2026-05-01",
    "2026-05-04",
    "2026-05-05",
    "2026-06-19",
    "2026-09-25",
    "2026-10-01",
    "2026-10-02",
    "2026-10-05",
    "2026-10-06",
    "2026-10-07",
];

/// Weekday closures of 2027: **provisional**. The exchanges publish the calendar in
/// late December; until then these follow the official festival dates and the usual
/// pattern (Spring Festival from its eve for a week, National Day 1–7 October).
/// Replace them with `calendar.holidays` once the notice is out.
const HOLIDAYS_2027_PROVISIONAL: &[&str] = &[
    "2027-01-01",
    "2027-02-05",
    "2027-02-08",
    "2027-02-09",
    "2027-02-10",
    "2027-02-11",
    "2027-02-12",
    "2027-04-05",
    "2027-05-03",
    "2027-05-04",
    "2027-05-05",
    "2027-06-09",
    "2027-09-15",
    "2027-10-01",
    "2027-10-04",
    "2027-10-05",
    "2027-10-06",
    "2027-10-07",
];

/// Every built-in weekday closure: 2024 to 2026 as published, 2027 provisional.
pub fn published() -> impl Iterator<Item = NaiveDate> {
    [
        HOLIDAYS_2024,
        HOLIDAYS_2025,
        HOLIDAYS_2026,
        HOLIDAYS_2027_PROVISIONAL,
    ]
    .into_iter()
    .flatten()
    .map(|d| NaiveDate::parse_from_str(d, "%Y-%m-%d").expect("built-in dates are valid"))
}

/// The years [`published`] covers, in order.
pub const YEARS: [i32; 4] = [2024, 2025, 2026, 2027];

#[cfg(test)]
mod tests {
    use super::*;

    /// Each list holds weekdays of its own year only, in order.
    #[test]
    fn each_year_holds_its_own_weekdays() {
        use chrono::Datelike;
        let mut last = None;
        for day in published() {
            assert!(YEARS.contains(&day.year()), "{day}");
            assert!(
                day.weekday().number_from_monday() <= 5,
                "{day} is a weekend"
            );
            assert!(last < Some(day), "{day} out of order");
            last = Some(day);
        }
        assert!(published().any(|d| d == NaiveDate::from_ymd_opt(2027, 1, 1).unwrap()));
    }
}
