//! The K-lines of any priced security (a stock, an index, an ETF, a foreign
//! listing) as the upstream's K-line answers give them.

use std::ops::RangeInclusive;

use chrono::{DateTime, Duration as Days, NaiveDate, Utc};
use serde_json::json;

use crate::market::{self, Adjust, Security, Venue};
use crate::request::{Answer, Call, Refusal};

/// A priced security as a K-line answer names it.
pub(crate) struct Listing<'a> {
    pub code: &'a str,
    /// Eastmoney market id.
    pub market: u8,
    pub name: &'a str,
    /// Decimal places of its prices (2 for stocks, 3 for funds).
    pub decimals: usize,
    pub security: Security,
    /// Its daily price limit (the bound of the intraday walk).
    pub limit: f64,
    /// Where it trades: its calendar, hours and local dates.
    pub venue: Venue,
}

/// A K-line answer. The upstream's only sample is a failure ("Failed to fetch
/// kline"), so the shape is a guess in Eastmoney's push2his style: `{code, market,
/// name, decimal, dktotal, klines: ["date,open,close,high,low,volume,amount,
/// amplitude,changeRate,change,turnover"]}`. Takes `period` (`day|week|month`),
/// `fqt` (`pre|after|none`, `post` = `after`) and `from`/`to` (`YYYY-MM-DD`).
pub(crate) fn kline(call: &Call, listing: &Listing<'_>, now: DateTime<Utc>) -> Answer {
    let q = &call.query;
    let venue = listing.venue;
    let today = venue.date(now);
    let periods: &[&str] = if call.template == "/stock/kline" {
        &["1m", "5m", "15m", "30m", "60m", "day", "week", "month"]
    } else {
        &["day", "week", "month"]
    };
    let period = q.choice("period", periods, "day")?;
    let adjust =
        Adjust::from_fqt(q.choice("fqt", &Adjust::FQT, "pre")?).ok_or(Refusal::BadRequest)?;
    let rows = match period.strip_suffix('m').and_then(|m| m.parse::<u32>().ok()) {
        Some(minutes) => {
            // Without a range, the last few trading days (more for longer bars).
            let days = match minutes {
                1 => 5,
                5 => 10,
                15 => 20,
                30 => 40,
                _ => 60,
            };
            let mut first = today;
            for _ in 1..days {
                first = venue.last_trading_day(first - Days::days(1));
            }
            // Minute bars are kept for about a quarter (60 trading days); an earlier
            // `from` starts there.
            let mut kept = today;
            for _ in 1..60 {
                kept = venue.last_trading_day(kept - Days::days(1));
            }
            let from = q.date("from")?.unwrap_or(first).max(kept);
            let to = q.date("to")?.unwrap_or(today);
            market::minute_rows(
                venue,
                listing.security,
                listing.limit,
                now,
                minutes,
                from..=to,
                listing.decimals,
            )
        }
        None => {
            let range: RangeInclusive<NaiveDate> =
                q.date("from")?.unwrap_or(NaiveDate::MIN)..=q.date("to")?.unwrap_or(today);
            market::kline_rows(
                venue,
                listing.security,
                today,
                period,
                adjust,
                range,
                listing.decimals,
            )
        }
    };
    Ok(json!({
        "code": listing.code,
        "market": listing.market,
        "name": listing.name,
        "decimal": listing.decimals,
        "dktotal": rows.len(),
        "klines": rows,
    }))
}
