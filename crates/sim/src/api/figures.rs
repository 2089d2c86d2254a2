//! A stock's quote snapshot in the upstream's units (prices in fen, ratios x100),
//! from which the quote rows, the screens and the market boards are written.

use chrono::{DateTime, Datelike, Duration as Days, Utc};

use super::{r2, scaled};
use crate::company::{self, security};
use crate::market;
use crate::universe::{Stock, rng};

/// A quote snapshot in the upstream's units: prices in fen (x100), ratios x100.
pub(crate) struct Figures {
    pub price: i64,
    pub pre_close: i64,
    pub open: i64,
    pub high: i64,
    pub low: i64,
    /// x100 percent, from the rounded prices (so it agrees with them).
    pub change_rate: i64,
    /// Lots of 100 shares.
    pub volume: i64,
    /// Yuan.
    pub amount: f64,
    pub amplitude: i64,
    pub turnover: i64,
    pub volume_ratio: i64,
    /// Change over the last five minutes, x100 percent.
    pub speed: i64,
    pub pe_dynamic: i64,
    pub pb: i64,
    pub eps: f64,
}

/// The figures of `s` at `now`.
pub(crate) fn figures(s: &Stock, now: DateTime<Utc>) -> Figures {
    let sec = security(s);
    let q = market::quote(sec, s.limit(), now);
    let before = market::quote(sec, s.limit(), now - Days::minutes(5));
    let today = market::trading_date(now);
    let v = company::valuation(s, q.price, today);
    let fen = |p: f64| scaled(p, 2);
    let (price, pre_close) = (fen(q.price), fen(q.pre_close));
    // The volume ratio holds for the day.
    let day_seed = s.seed ^ (today.num_days_from_ce() as u64).wrapping_mul(0x9E37);
    Figures {
        price,
        pre_close,
        open: fen(q.open),
        high: fen(q.high),
        low: fen(q.low),
        change_rate: ((price as f64 / pre_close as f64 - 1.0) * 10_000.0).round() as i64,
        volume: (q.volume / 100.0).round() as i64,
        amount: r2(q.amount),
        amplitude: scaled((q.high - q.low) / q.pre_close * 100.0, 2),
        turnover: scaled(q.turnover, 2),
        volume_ratio: scaled(0.4 + 2.2 * rng(day_seed).f64(), 2),
        speed: scaled((q.price / before.price - 1.0) * 100.0, 2),
        pe_dynamic: scaled(v.pe_dynamic, 2),
        pb: scaled(v.pb, 2),
        eps: (v.eps * 1e9).round() / 1e9,
    }
}
