//! The eleven macro indicators: raw Eastmoney datacenter tables (`{pages, data,
//! count}`, UPPER_SNAKE, newest first) for ten, PMI mapped to camelCase (`{total, page,
//! pageSize, data}`, its series a bare array); each `/series` has fewer columns.

use chrono::{DateTime, Datelike, Duration as Days, NaiveDate, Utc, Weekday};
use serde_json::{Map, Value, json};

use super::{datacenter, mapped_page, unrouted};
use crate::company::stamp;
use crate::market::{self, smooth};
use crate::request::{Answer, Call};
use crate::universe::seed_of;

/// How often an indicator is published, and since when.
#[derive(Clone, Copy)]
enum Frequency {
    /// Monthly from (year, month).
    Monthly(i32, u32),
    /// Quarterly from (year, quarter).
    Quarterly(i32, u32),
    /// Loan prime rates: one row per weekday until the 2019 reform, then one a month
    /// (the 20th).
    Lpr,
}

/// One column: name, level, how far it wanders, decimals, and whether January and
/// February print null (China publishes some figures for the two months together).
#[derive(Clone, Copy)]
struct Column {
    name: &'static str,
    level: f64,
    spread: f64,
    decimals: i32,
    early_null: bool,
}

const fn col(name: &'static str, level: f64, spread: f64, decimals: i32) -> Column {
    Column {
        name,
        level,
        spread,
        decimals,
        early_null: false,
    }
}

const fn early_null(c: Column) -> Column {
    Column {
        early_null: true,
        ..c
    }
}

struct Indicator {
    slug: &'static str,
    frequency: Frequency,
    columns: &'static [Column],
    /// The columns of `/series`.
    series: &'static [&'static str],
}

const INDICATORS: &[Indicator] = &[
    Indicator {
        slug: "pmi",
        frequency: Frequency::Monthly(2008, 1),
        columns: &[
            col("makeIndex", 50.0, 2.5, 1),
            col("nmakeIndex", 53.0, 3.0, 1),
            col("makeSame", 0.0, 3.0, 8),
            col("nmakeSame", 0.0, 3.0, 8),
        ],
        series: &["makeIndex", "nmakeIndex"],
    },
    Indicator {
        slug: "cpi",
        frequency: Frequency::Monthly(2008, 1),
        columns: &[
            col("NATIONAL_SAME", 1.5, 2.0, 1),
            col("NATIONAL_BASE", 101.5, 2.0, 1),
            col("NATIONAL_SEQUENTIAL", 0.1, 0.6, 1),
            col("NATIONAL_ACCUMULATE", 101.5, 1.5, 1),
            col("CITY_SAME", 1.6, 2.0, 1),
            col("CITY_BASE", 101.6, 2.0, 1),
            col("CITY_SEQUENTIAL", 0.1, 0.6, 1),
            col("CITY_ACCUMULATE", 101.6, 1.5, 1),
            col("RURAL_SAME", 1.4, 2.2, 1),
            col("RURAL_BASE", 101.4, 2.2, 1),
            col("RURAL_SEQUENTIAL", 0.1, 0.7, 1),
            col("RURAL_ACCUMULATE", 101.4, 1.6, 1),
        ],
        series: &["NATIONAL_BASE", "CITY_BASE", "RURAL_BASE"],
    },
    Indicator {
        slug: "ppi",
        frequency: Frequency::Monthly(2006, 1),
        columns: &[
            col("BASE", 100.0, 5.0, 1),
            col("BASE_SAME", 0.0, 5.0, 1),
            col("BASE_ACCUMULATE", 100.0, 4.0, 1),
        ],
        series: &["BASE", "BASE_ACCUMULATE"],
    },
    Indicator {
        slug: "gdp",
        frequency: Frequency::Quarterly(2006, 1),
        columns: &[
            col("DOMESTICL_PRODUCT_BASE", 250_000.0, 90_000.0, 0),
            col("FIRST_PRODUCT_BASE", 15_000.0, 6_000.0, 0),
            col("SECOND_PRODUCT_BASE", 95_000.0, 30_000.0, 0),
            col("THIRD_PRODUCT_BASE", 140_000.0, 60_000.0, 0),
            col("SUM_SAME", 6.5, 3.0, 1),
            col("FIRST_SAME", 3.8, 1.5, 1),
            col("SECOND_SAME", 6.0, 3.5, 1),
            col("THIRD_SAME", 6.8, 3.0, 1),
        ],
        series: &["SUM_SAME", "FIRST_SAME", "SECOND_SAME", "THIRD_SAME"],
    },
    Indicator {
        slug: "currency-supply",
        frequency: Frequency::Monthly(2008, 1),
        columns: &[
            col("BASIC_CURRENCY", 2_500_000.0, 1_000_000.0, 2),
            col("BASIC_CURRENCY_SAME", 9.5, 3.0, 1),
            col("BASIC_CURRENCY_SEQUENTIAL", 0.8, 1.2, 8),
            col("CURRENCY", 800_000.0, 300_000.0, 2),
            col("CURRENCY_SAME", 6.0, 6.0, 1),
            col("CURRENCY_SEQUENTIAL", 0.5, 2.5, 8),
            col("FREE_CASH", 100_000.0, 40_000.0, 2),
            col("FREE_CASH_SAME", 8.0, 5.0, 1),
            col("FREE_CASH_SEQUENTIAL", 0.5, 4.0, 8),
        ],
        series: &[
            "BASIC_CURRENCY_SEQUENTIAL",
            "CURRENCY_SEQUENTIAL",
            "FREE_CASH_SEQUENTIAL",
        ],
    },
    Indicator {
        slug: "lpr",
        frequency: Frequency::Lpr,
        columns: &[
            col("LPR1Y", 3.8, 0.8, 2),
            col("LPR5Y", 4.4, 0.8, 2),
            col("RATE_1", 4.35, 0.0, 2),
            col("RATE_2", 4.9, 0.0, 2),
        ],
        series: &["LPR1Y", "LPR5Y", "RATE_1", "RATE_2"],
    },
    Indicator {
        slug: "new-loans",
        frequency: Frequency::Monthly(2008, 1),
        columns: &[
            col("RMB_LOAN", 15_000.0, 12_000.0, 0),
            col("RMB_LOAN_SAME", 0.0, 40.0, 8),
            col("RMB_LOAN_SEQUENTIAL", 0.0, 150.0, 8),
            col("RMB_LOAN_ACCUMULATE", 90_000.0, 60_000.0, 0),
            col("LOAN_ACCUMULATE_SAME", 0.0, 20.0, 8),
        ],
        series: &["RMB_LOAN"],
    },
    Indicator {
        slug: "fixed-asset-investment",
        frequency: Frequency::Monthly(2009, 8),
        columns: &[
            early_null(col("BASE", 50_000.0, 20_000.0, 0)),
            col("BASE_SAME", 5.0, 8.0, 2),
            early_null(col("BASE_SEQUENTIAL", 0.2, 1.0, 2)),
            col("BASE_ACCUMULATE", 300_000.0, 200_000.0, 0),
        ],
        series: &["BASE", "BASE_SAME"],
    },
    Indicator {
        slug: "total-retail",
        frequency: Frequency::Monthly(2009, 4),
        columns: &[
            early_null(col("RETAIL_TOTAL", 35_000.0, 10_000.0, 0)),
            col("RETAIL_TOTAL_SAME", 5.0, 6.0, 1),
            early_null(col("RETAIL_TOTAL_SEQUENTIAL", 0.3, 1.0, 2)),
            col("RETAIL_TOTAL_ACCUMULATE", 200_000.0, 150_000.0, 0),
            col("RETAIL_ACCUMULATE_SAME", 5.0, 5.0, 1),
        ],
        series: &["RETAIL_TOTAL"],
    },
    Indicator {
        slug: "customs-trade",
        frequency: Frequency::Monthly(2008, 1),
        columns: &[
            col("EXIT_BASE", 250_000_000.0, 80_000_000.0, 2),
            col("IMPORT_BASE", 200_000_000.0, 60_000_000.0, 2),
            col("EXIT_BASE_SAME", 5.0, 15.0, 1),
            col("IMPORT_BASE_SAME", 4.0, 15.0, 1),
            col("EXIT_BASE_SEQUENTIAL", 0.0, 20.0, 8),
            col("IMPORT_BASE_SEQUENTIAL", 0.0, 20.0, 8),
            col("EXIT_ACCUMULATE", 1_000_000_000.0, 800_000_000.0, 3),
            col("IMPORT_ACCUMULATE", 800_000_000.0, 600_000_000.0, 2),
            col("EXIT_ACCUMULATE_SAME", 5.0, 12.0, 1),
            col("IMPORT_ACCUMULATE_SAME", 4.0, 12.0, 1),
        ],
        series: &["EXIT_BASE", "IMPORT_BASE"],
    },
    Indicator {
        slug: "gold-currency",
        frequency: Frequency::Monthly(2008, 1),
        columns: &[
            col("GOLD_RESERVES", 2_500.0, 1_500.0, 2),
            col("GOLD_RESERVES_SAME", 10.0, 30.0, 8),
            col("GOLD_RESERVES_SEQUENTIAL", 0.5, 5.0, 8),
            col("FOREX", 31_000.0, 3_000.0, 2),
            col("FOREX_SAME", 1.0, 6.0, 8),
            col("FOREX_SEQUENTIAL", 0.0, 2.0, 8),
        ],
        series: &["GOLD_RESERVES", "FOREX"],
    },
];

/// Rows per internal page of a series: a series answers its first page only, so the
/// long LPR history reports `pages: 4`.
const SERIES_PAGE: usize = 500;

pub(super) fn answer(call: &Call, now: DateTime<Utc>) -> Answer {
    let rest = call.template.strip_prefix("/macro/").unwrap_or_default();
    let (slug, series) = match rest.strip_suffix("/series") {
        Some(slug) => (slug, true),
        None => (rest, false),
    };
    let Some(indicator) = INDICATORS.iter().find(|i| i.slug == slug) else {
        return unrouted(call);
    };
    let today = market::trading_date(now);
    let dates = dates(indicator.frequency, today);
    let camel = indicator.slug == "pmi";
    if series {
        let rows: Vec<Value> = dates
            .iter()
            .take(SERIES_PAGE)
            .map(|&d| table_row(indicator, d, Some(indicator.series)))
            .collect();
        return Ok(if camel {
            Value::Array(rows)
        } else {
            datacenter(rows, dates.len(), dates.len().div_ceil(SERIES_PAGE))
        });
    }
    let paging = call.query.paging(20)?;
    let rows = paging
        .slice(&dates)
        .into_iter()
        .map(|d| table_row(indicator, d, None))
        .collect();
    Ok(if camel {
        mapped_page(rows, dates.len(), paging)
    } else {
        datacenter(rows, dates.len(), paging.pages(dates.len()))
    })
}

/// The report dates published by `today`, newest first: a month (or quarter) is out
/// once the next month has begun.
fn dates(frequency: Frequency, today: NaiveDate) -> Vec<NaiveDate> {
    let first_of = |y: i32, m: u32| NaiveDate::from_ymd_opt(y, m, 1).expect("a real month");
    let this_month = first_of(today.year(), today.month());
    let mut out = Vec::new();
    match frequency {
        Frequency::Monthly(y, m) | Frequency::Quarterly(y, m) => {
            let quarterly = matches!(frequency, Frequency::Quarterly(..));
            let (step, mut month) = if quarterly {
                (3, (y, m * 3))
            } else {
                (1, (y, m))
            };
            while first_of(month.0, month.1) < this_month {
                out.push(first_of(month.0, month.1));
                month.1 += step;
                if month.1 > 12 {
                    month = (month.0 + 1, month.1 - 12);
                }
            }
        }
        Frequency::Lpr => {
            let reform = NaiveDate::from_ymd_opt(2019, 8, 20).expect("a real date");
            let mut day = NaiveDate::from_ymd_opt(2013, 10, 25).expect("a real date");
            while day <= today {
                let weekday = !matches!(day.weekday(), Weekday::Sat | Weekday::Sun);
                if (day < reform && weekday) || (day >= reform && day.day() == 20) {
                    out.push(day);
                }
                day += Days::days(1);
            }
        }
    }
    out.reverse();
    out
}

/// One row at `date`: the date key(s), then every column (or only `only`).
fn table_row(indicator: &Indicator, date: NaiveDate, only: Option<&[&str]>) -> Value {
    let camel = indicator.slug == "pmi";
    let mut row = Map::new();
    let (date_key, time_key) = match (camel, indicator.frequency) {
        (true, _) => ("reportDate", "time"),
        (false, Frequency::Lpr) => ("TRADE_DATE", ""),
        (false, _) => ("REPORT_DATE", "TIME"),
    };
    row.insert(date_key.into(), stamp(date).into());
    if only.is_none() && !time_key.is_empty() {
        let time = match indicator.frequency {
            Frequency::Quarterly(..) => format!("{}年第{}季度", date.year(), date.month() / 3),
            _ => format!("{}年{:02}月份", date.year(), date.month()),
        };
        row.insert(time_key.into(), time.into());
    }
    let x = f64::from(date.num_days_from_ce()) / 180.0;
    for c in indicator.columns {
        if only.is_some_and(|names| !names.contains(&c.name)) {
            continue;
        }
        let value = if c.early_null && date.month() <= 2 {
            Value::Null
        } else {
            let v = c.level + c.spread * smooth(seed_of(c.name) ^ seed_of(indicator.slug), x);
            let scale = 10f64.powi(c.decimals);
            if c.decimals == 0 {
                json!(v.round() as i64)
            } else {
                json!((v * scale).round() / scale)
            }
        };
        row.insert(c.name.into(), value);
    }
    Value::Object(row)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn day(s: &str) -> NaiveDate {
        NaiveDate::parse_from_str(s, "%Y-%m-%d").unwrap()
    }

    #[test]
    fn counts_and_dates_look_like_the_samples() {
        let today = day("2026-04-24");
        let cpi = INDICATORS.iter().find(|i| i.slug == "cpi").unwrap();
        let d = dates(cpi.frequency, today);
        assert_eq!(d.len(), 219);
        assert_eq!(d[0], day("2026-03-01"));
        let gdp = INDICATORS.iter().find(|i| i.slug == "gdp").unwrap();
        let d = dates(gdp.frequency, today);
        assert_eq!((d.len(), d[0]), (81, day("2026-03-01")));
        let row = table_row(gdp, d[0], None);
        assert_eq!(row["TIME"], "2026年第1季度");
        let lpr = dates(Frequency::Lpr, today);
        assert!((1_500..1_700).contains(&lpr.len()), "{}", lpr.len());
        assert_eq!(lpr.len().div_ceil(SERIES_PAGE), 4);
    }
}
