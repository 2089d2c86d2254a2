//! ETF payloads. Holdings, allocations, fees and the tracked index follow documented
//! samples; the list, screen, detail, K-line and valuation have no usable sample
//! upstream, so their shapes are guesses in the same style, each saying so.

use chrono::{DateTime, Datelike, NaiveDate, Utc};
use serde_json::{Value, json};

use super::{etf, r2, scaled, unrouted};
use crate::company::{latest_period, periods, stamp};
use crate::market::{self, Security};
use crate::request::{Answer, Call};
use crate::universe::{Etf, TRACKED_INDICES, rng, universe};

pub(super) fn answer(call: &Call, now: DateTime<Utc>) -> Answer {
    let one = |f: fn(&Etf, DateTime<Utc>) -> Value| etf(call.id()).map(|e| f(e, now));
    match call.template {
        "/fund/all-etf-list" => Ok(etf_list(universe().etfs.iter(), now)),
        "/fund/selection" => {
            let filter = call.query.text("filter", "");
            let hits = universe()
                .etfs
                .iter()
                .filter(|e| e.name.contains(filter) || TRACKED_INDICES[e.index].0.contains(filter));
            Ok(etf_list(hits, now))
        }
        "/fund/detail/{code}" => one(detail),
        "/fund/kline" => {
            let e = etf(call.query.required("code")?)?;
            super::kline::kline(call, &listing(e), now)
        }
        "/fund/holdings/{code}" => one(holdings),
        "/fund/asset-allocation/{code}" => one(asset_allocation),
        "/fund/industry-allocation/{code}" => one(industry_allocation),
        "/fund/transactions/{code}" => one(
            |e, _| json!([{ "secucode": e.full_code(), "managementFee": 0.5, "custodyFee": 0.1, "subscribeStatus": "场内交易", "redType": "场内交易" }]),
        ),
        "/fund/following-index/{code}" => one(following_index),
        "/fund/valuation-analysis/{code}" => one(valuation),
        _ => unrouted(call),
    }
}

/// An ETF as a K-line names it (the fund K-line's, and the stock K-line's).
pub(super) fn listing(e: &'static Etf) -> super::kline::Listing<'static> {
    super::kline::Listing {
        code: &e.code,
        market: e.exchange.market(),
        name: &e.name,
        decimals: ETF_DECIMALS as usize,
        security: security(e),
        limit: 0.10,
        venue: crate::market::Venue::China,
    }
}

fn security(e: &Etf) -> Security {
    Security {
        seed: e.seed,
        base_price: e.base_price,
        listed: e.listed,
        shares_wan: 500_000.0,
    }
}

/// ETFs are quoted to the tenth of a fen: three decimals, prices x1000.
const ETF_DECIMALS: u32 = 3;

/// One ETF quote row. The upstream's list and screen samples are placeholders (their
/// bodies were not valid JSON), so the row is a guess in the push2 style of
/// `/stock/list`, with `id`/`f152` = 3 decimal places and prices x1000 accordingly
/// (inference: `id` looks like Eastmoney's decimal-places field).
fn etf_row(e: &Etf, now: DateTime<Utc>) -> Value {
    let q = market::quote(security(e), 0.1, now);
    let (price, pre) = (
        scaled(q.price, ETF_DECIMALS),
        scaled(q.pre_close, ETF_DECIMALS),
    );
    json!({
        "id": ETF_DECIMALS,
        "code": e.code,
        "name": e.name,
        "marketId": e.exchange.market(),
        "newPrice": price,
        "preClosePrice": pre,
        "upsDowns": price - pre,
        "changeRate": ((price as f64 / pre as f64 - 1.0) * 10_000.0).round() as i64,
        "volume": (q.volume / 100.0).round() as i64,
        "dealAmount": r2(q.amount),
        "turnoverRate": scaled(q.turnover, 2),
        "trackingIndex": TRACKED_INDICES[e.index].0,
        "company": e.company,
        "f152": ETF_DECIMALS,
    })
}

/// `{total, diff}` of ETF rows (a guess, see [`etf_row`]).
fn etf_list<'a>(etfs: impl Iterator<Item = &'a Etf>, now: DateTime<Utc>) -> Value {
    let rows: Vec<Value> = etfs.map(|e| etf_row(e, now)).collect();
    json!({ "total": rows.len(), "diff": rows })
}

/// One fund's basic information: a single object (a guess: the only sample is the
/// failure "socket hang up").
fn detail(e: &Etf, now: DateTime<Utc>) -> Value {
    let q = market::quote(security(e), 0.1, now);
    let (index, index_code, _) = TRACKED_INDICES[e.index];
    json!({
        "code": e.code,
        "secucode": e.full_code(),
        "name": e.name,
        "fullName": format!("{}交易型开放式指数证券投资基金", e.name.trim_end_matches(e.company)),
        "fundType": "指数型-股票",
        "company": format!("{}基金管理有限公司", e.company),
        "listingDate": stamp(e.listed),
        "trackingIndex": index,
        "trackingIndexCode": index_code,
        "fundSize": r2(1e8 * (1.0 + (e.seed % 500) as f64)),
        "managementFee": 0.5,
        "custodyFee": 0.1,
        "newPrice": (q.price * 1000.0).round() / 1000.0,
        "changeRate": r2(q.pct()),
        "netValue": (q.pre_close * 1000.0).round() / 1000.0,
        "netValueDate": stamp(market::last_trading_day(market::trading_date(now) - chrono::Duration::days(1))),
    })
}

/// The top ten stock positions at the latest report (ChiNext and STAR indices hold
/// their own board's stocks).
fn holdings(e: &Etf, now: DateTime<Utc>) -> Value {
    let p = latest_period(market::trading_date(now));
    let mut r = rng(e.seed ^ 0x401D);
    let board = match TRACKED_INDICES[e.index].0 {
        "创业板指" | "创业板50" => "30",
        "科创50" | "科创芯片" => "68",
        _ => "",
    };
    let stocks: Vec<_> = universe()
        .stocks
        .iter()
        .filter(|s| s.code.starts_with(board))
        .collect();
    let rows: Vec<Value> = (0..10)
        .map(|i| {
            let s = stocks[r.usize(..stocks.len())];
            let shares = (s.shares_wan * 10_000.0 * 0.002 * r.f64()).round() as i64;
            let price = market::close_on(crate::company::security(s), p.end);
            json!({
                "stockCode": s.code,
                "stockName": s.name,
                "holdNum": shares,
                "holdMarketCap": r2(shares as f64 * price),
                "netAssetRatio": r2(15.0 / (1.0 + i as f64 * 0.4)),
                "holdRank": i + 1,
                "reportDate": p.stamp(),
            })
        })
        .collect();
    Value::Array(rows)
}

fn asset_allocation(e: &Etf, now: DateTime<Utc>) -> Value {
    let rows: Vec<Value> = periods(market::trading_date(now), 8)
        .into_iter()
        .map(|p| {
            let mut r = rng(e.seed ^ p.end.num_days_from_ce() as u64);
            let size = 1e8 * (1.0 + (e.seed % 500) as f64);
            let stock = 95.0 + 4.9 * r.f64();
            json!({
                "reportDate": p.stamp(), "reportType": p.fund_label(),
                "stockRatio": r2(stock), "cashRatio": r2(100.5 - stock),
                "stockValue": r2(size * stock / 100.0), "cashValue": r2(size * (100.5 - stock) / 100.0),
            })
        })
        .collect();
    Value::Array(rows)
}

/// CSRC industry categories funds report their allocation in.
const CSRC_INDUSTRIES: &[&str] = &[
    "制造业",
    "金融业",
    "信息传输、软件和信息技术服务业",
    "采矿业",
    "电力、热力、燃气及水生产和供应业",
    "批发和零售业",
    "交通运输、仓储和邮政业",
    "房地产业",
    "科学研究和技术服务业",
    "建筑业",
];

fn industry_allocation(e: &Etf, now: DateTime<Utc>) -> Value {
    let p = latest_period(market::trading_date(now));
    let mut r = rng(e.seed ^ 0x1A);
    let size = 1e8 * (1.0 + (e.seed % 500) as f64);
    let mut left = 99.0;
    let rows: Vec<Value> = CSRC_INDUSTRIES
        .iter()
        .map(|name| {
            let ratio = left * (0.3 + 0.5 * r.f64());
            left -= ratio;
            json!({ "industryName": name, "marketCap": r2(size * ratio / 100.0), "marketCapRatio": r2(ratio), "reportDate": p.stamp() })
        })
        .collect();
    Value::Array(rows)
}

fn index_security(code: &str, base: f64) -> Security {
    Security {
        seed: crate::universe::seed_of(code),
        base_price: base,
        listed: NaiveDate::from_ymd_opt(2005, 1, 4).expect("a real date"),
        shares_wan: 1e8,
    }
}

/// The tracked index: a single object with plain float prices.
fn following_index(e: &Etf, now: DateTime<Utc>) -> Value {
    let (name, code, count) = TRACKED_INDICES[e.index];
    let q = market::quote(index_security(code, 3_000.0), 0.1, now);
    let year_ago = market::close_on(
        index_security(code, 3_000.0),
        market::trading_date(now) - chrono::Duration::days(365),
    );
    json!({
        "securityCode": code,
        "securityName": name,
        "securityType": "01",
        "price": r2(q.price),
        "changePercent": (q.pct() * 1e4).round() / 1e4,
        "securityCount": count,
        "change": r2(q.price - q.pre_close),
        "yearlyPerformance": r2((q.price / year_ago - 1.0) * 100.0),
        "listingTimeFlag": "02",
    })
}

/// The tracked index's valuation. The sample is `{}` (shape undocumented): a guess,
/// one object of ratios and their ten-year percentiles.
fn valuation(e: &Etf, now: DateTime<Utc>) -> Value {
    let today = market::trading_date(now);
    let (name, code, _) = TRACKED_INDICES[e.index];
    let mut r = rng(e.seed ^ u64::from(today.ordinal()) ^ (today.year() as u64) << 16);
    json!({
        "securityCode": code,
        "securityName": name,
        "peTtm": r2(8.0 + 40.0 * r.f64()),
        "pePercentile": r2(100.0 * r.f64()),
        "pb": r2(0.8 + 5.0 * r.f64()),
        "pbPercentile": r2(100.0 * r.f64()),
        "dividendYield": r2(5.0 * r.f64()),
        "valuationLevel": (["低估", "适中", "高估"][r.usize(..3)]),
        "tradeDate": stamp(market::last_trading_day(today)),
    })
}
