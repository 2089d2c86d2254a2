//! The simulated companies' reports: report periods, what each stock reports for a
//! period (EPS, book value, profit, revenue) and the valuation ratios a price gives
//! against them. Deterministic per stock and period; prices are `market`'s.

use chrono::{Datelike, Duration as Days, NaiveDate};

use super::market::{self, Security};
use super::universe::{INDUSTRIES, Stock, rng};

/// Days after a quarter end by which its reports count as published (the legal
/// deadlines are a month for Q1 and Q3, two months for H1, four for the year; one date
/// keeps the simulation simple, and the upstream's samples of late April already
/// carry Q1 figures).
const PUBLISHED_AFTER_DAYS: i64 = 20;

/// A report period, named by its last day (a quarter end).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Period {
    pub end: NaiveDate,
}

impl Period {
    /// The share of the year the period's cumulative figures cover (0.25 for Q1).
    pub fn fraction(self) -> f64 {
        f64::from(self.end.month()) / 12.0
    }

    /// The report's name as the financial indicators write it: `2026一季报`.
    pub fn label(self) -> String {
        format!("{}{}", self.end.year(), self.kind())
    }

    /// The report's name as the diagnosis writes it: `2026年一季报`.
    pub fn long_label(self) -> String {
        format!("{}年{}", self.end.year(), self.kind())
    }

    /// A fund report's name: `2026年一季度`.
    pub fn fund_label(self) -> String {
        let q = ["一", "二", "三", "四"][(self.end.month() as usize - 1) / 3];
        format!("{}年{q}季度", self.end.year())
    }

    /// `2026-03-31 00:00:00`, the upstream's date-time form.
    pub fn stamp(self) -> String {
        stamp(self.end)
    }

    fn kind(self) -> &'static str {
        match self.end.month() {
            3 => "一季报",
            6 => "中报",
            9 => "三季报",
            _ => "年报",
        }
    }

    /// The period before this one.
    pub fn previous(self) -> Period {
        let (y, m) = (self.end.year(), self.end.month());
        let end = match m {
            12 => NaiveDate::from_ymd_opt(y, 9, 30),
            9 => NaiveDate::from_ymd_opt(y, 6, 30),
            6 => NaiveDate::from_ymd_opt(y, 3, 31),
            _ => NaiveDate::from_ymd_opt(y - 1, 12, 31),
        }
        .expect("quarter ends are real dates");
        Period { end }
    }
}

/// `YYYY-MM-DD 00:00:00`.
pub fn stamp(day: NaiveDate) -> String {
    format!("{day} 00:00:00")
}

/// The latest period whose reports are out on `today`.
pub fn latest_period(today: NaiveDate) -> Period {
    let y = today.year();
    let mut p = Period {
        end: NaiveDate::from_ymd_opt(y, 12, 31).expect("a real date"),
    };
    while p.end + Days::days(PUBLISHED_AFTER_DAYS) > today {
        p = p.previous();
    }
    p
}

/// The latest `n` published periods, newest first.
pub fn periods(today: NaiveDate, n: usize) -> Vec<Period> {
    std::iter::successors(Some(latest_period(today)), |p| Some(p.previous()))
        .take(n)
        .collect()
}

/// The period ending exactly on `day`, if `day` is a quarter end.
pub fn period_at(day: NaiveDate) -> Option<Period> {
    matches!(
        (day.month(), day.day()),
        (3, 31) | (6, 30) | (9, 30) | (12, 31)
    )
    .then_some(Period { end: day })
}

/// The priced identity of a stock.
pub fn security(s: &Stock) -> Security {
    Security {
        seed: s.seed,
        base_price: s.base_price,
        listed: s.listed,
        shares_wan: s.shares_wan,
    }
}

/// What a stock reports for one period (cumulative from January).
#[derive(Clone, Copy, Debug)]
pub struct Report {
    /// Basic earnings per share, yuan.
    pub eps: f64,
    /// EPS after non-recurring items.
    pub eps_deducted: f64,
    /// Book value per share, yuan.
    pub bps: f64,
    /// Net profit attributable to the parent, yuan.
    pub net_profit: f64,
    /// Total operating income, yuan.
    pub revenue: f64,
    /// Weighted return on equity, percent.
    pub roe: f64,
    /// Debt to assets, percent.
    pub debt_ratio: f64,
}

/// Shares in issue.
pub fn total_shares(s: &Stock) -> f64 {
    (s.shares_wan * 10_000.0).round()
}

/// Freely tradable shares (60–100 % of the total).
pub fn free_shares(s: &Stock) -> f64 {
    (total_shares(s) * (0.6 + 0.4 * rng(s.seed ^ 0xF5).f64())).round()
}

/// The full-year EPS of `year`: the price at the year's end over a per-stock PE,
/// negative for a loss year (about one year in ten).
fn annual_eps(s: &Stock, year: i32) -> f64 {
    let end = NaiveDate::from_ymd_opt(year, 12, 31).expect("a real date");
    let price = market::close_on(security(s), end);
    let pe = 6.0 + 60.0 * rng(s.seed ^ 0x9E).f64().powi(2);
    let mut r = rng(s.seed ^ (year as u64).wrapping_mul(0x51ED));
    let sign = if r.u32(0..10) == 0 { -0.3 } else { 1.0 };
    price / pe * sign * (0.85 + 0.3 * r.f64())
}

/// The report of `s` for period `p`.
pub fn report(s: &Stock, p: Period) -> Report {
    let mut r = rng(s.seed ^ p.end.num_days_from_ce() as u64);
    let eps = annual_eps(s, p.end.year()) * p.fraction() * (0.9 + 0.2 * r.f64());
    let pb = 0.5 + 7.5 * rng(s.seed ^ 0xB0).f64().powi(2);
    let bps = market::close_on(security(s), p.end) / pb;
    let net_profit = eps * total_shares(s);
    let margin = 0.03 + 0.27 * rng(s.seed ^ 0x3A).f64();
    let bank = INDUSTRIES[s.industry] == "银行";
    Report {
        eps,
        eps_deducted: eps * (0.85 + 0.15 * r.f64()),
        bps,
        net_profit,
        revenue: net_profit.abs() / margin,
        roe: eps / bps * 100.0,
        debt_ratio: if bank {
            88.0 + 4.0 * r.f64()
        } else {
            20.0 + 60.0 * rng(s.seed ^ 0xDE).f64()
        },
    }
}

/// Valuation ratios at a price.
#[derive(Clone, Copy, Debug)]
pub struct Valuation {
    /// Price over the latest cumulative EPS annualised (Eastmoney's "dynamic" PE).
    pub pe_dynamic: f64,
    /// Price over the last full-year EPS.
    pub pe_static: f64,
    /// Price over the last four quarters' EPS.
    pub pe_ttm: f64,
    /// Price over the latest book value per share.
    pub pb: f64,
    /// Price times shares in issue, yuan.
    pub market_cap: f64,
    /// The latest report's EPS (cumulative).
    pub eps: f64,
}

/// The valuation of `s` at `price` on `today`.
pub fn valuation(s: &Stock, price: f64, today: NaiveDate) -> Valuation {
    let latest = latest_period(today);
    let now = report(s, latest);
    let last_year = annual_eps(
        s,
        latest.end.year() - if latest.fraction() < 1.0 { 1 } else { 0 },
    );
    let ttm = if latest.fraction() < 1.0 {
        now.eps + last_year * (1.0 - latest.fraction())
    } else {
        now.eps
    };
    Valuation {
        pe_dynamic: price / (now.eps / latest.fraction()),
        pe_static: price / last_year,
        pe_ttm: price / ttm,
        pb: price / now.bps,
        market_cap: price * total_shares(s),
        eps: now.eps,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::universe::universe;

    fn day(s: &str) -> NaiveDate {
        NaiveDate::parse_from_str(s, "%Y-%m-%d").unwrap()
    }

    #[test]
    fn periods_count_back_from_the_latest_published() {
        let p = periods(day("2026-04-24"), 5);
        let ends: Vec<String> = p.iter().map(|p| p.end.to_string()).collect();
        assert_eq!(
            ends,
            [
                "2026-03-31",
                "2025-12-31",
                "2025-09-30",
                "2025-06-30",
                "2025-03-31"
            ]
        );
        assert_eq!(p[0].label(), "2026一季报");
        assert_eq!(p[0].long_label(), "2026年一季报");
        assert_eq!(p[0].fund_label(), "2026年一季度");
        assert_eq!(p[1].label(), "2025年报");
        assert_eq!(latest_period(day("2026-03-07")).end, day("2025-12-31"));
        assert_eq!(
            period_at(day("2024-06-30")),
            Some(Period {
                end: day("2024-06-30")
            })
        );
        assert_eq!(period_at(day("2024-06-29")), None);
    }

    #[test]
    fn ratios_agree_with_the_reports() {
        let s = universe().stock("000001").unwrap();
        let today = day("2026-04-24");
        let r = report(s, latest_period(today));
        let v = valuation(s, 11.0, today);
        assert!((v.pe_dynamic - 11.0 / (r.eps * 4.0)).abs() < 1e-9);
        assert!((v.pb - 11.0 / r.bps).abs() < 1e-9);
        assert!(r.debt_ratio > 85.0, "a bank");
        assert_eq!(report(s, latest_period(today)).eps, r.eps, "deterministic");
    }
}
