//! Stock quotes and lists: Eastmoney push2 rows (`{total, diff}`, x100 integers,
//! unmapped `fNNN` keys), detail, search, K-lines, the valuation indicator and the
//! classification lists.

use chrono::{DateTime, NaiveDate, Utc};
use serde_json::{Value, json};

use super::figures::figures;
use super::kline::{Listing, kline};
use super::{r2, stock};
use crate::company::{self, security};
use crate::market::{self, Security, Venue};
use crate::request::{Answer, Call, Refusal, code_digits};
use crate::universe::{INDUSTRIES, REGIONS, STYLES, Stock, industry_code, province, universe};

/// The stock routes this file serves, or `None` for the company data (`company`).
pub(super) fn answer(call: &Call, now: DateTime<Utc>) -> Option<Answer> {
    Some(match call.template {
        "/stock/list" => Ok(stock_list(call.query.get("codes"), now)),
        "/stock/detail/{code}" => stock(call.id()).map(|s| quote_row(s, now)),
        "/stock/search" => Ok(search(call.query.text("keyword", ""))),
        "/stock/selection" => super::screen::selection(call, now),
        "/stock/kline" => stock_kline(call, now),
        "/stock/indicator/realtime/{code}" => stock(call.id()).map(|s| indicator(s, now)),
        "/stock/industry/list" => Ok(list(
            (0..INDUSTRIES.len()).map(|i| (industry_code(i), INDUSTRIES[i].to_owned())),
        )),
        "/stock/area/list" => Ok(list((0..REGIONS.len()).map(|i| (province(i), province(i))))),
        "/stock/concept/list" => Ok(list(
            universe().concepts.iter().map(|c| (c.clone(), c.clone())),
        )),
        "/stock/style/list" => Ok(list(STYLES.iter().map(|s| (s.to_string(), s.to_string())))),
        _ => return None,
    })
}

/// One Eastmoney push2 quote row, as `/stock/list`, `/stock/detail` and the stream
/// send it. The `fNNN` fields pass through unmapped upstream; their meaning is
/// inference (f31/f32 bid and ask in fen, f152 decimal places, f292 trading status).
pub(crate) fn quote_row(s: &Stock, now: DateTime<Utc>) -> Value {
    let f = figures(s, now);
    json!({
        "id": 2,
        "newPrice": f.price,
        "changeRate": f.change_rate,
        "upsDowns": f.price - f.pre_close,
        "volume": f.volume,
        "dealAmount": f.amount,
        "amplitude": f.amplitude,
        "turnoverRate": f.turnover,
        "dtsyl": f.pe_dynamic,
        "volumeRatio": f.volume_ratio,
        "code": s.code,
        "marketId": s.exchange.market(),
        "name": s.name,
        "preClosePrice": f.pre_close,
        "f19": 6,
        "speedIncrease": f.speed,
        "f30": (f.volume / 97).max(1),
        "f31": f.price - 1,
        "f32": f.price,
        "industry": INDUSTRIES[s.industry],
        "basicEps": f.eps,
        "f125": 0,
        "f139": 2,
        "f148": (f.low as f64 * 0.99).round() as i64,
        "f152": 2,
        "f292": 13,
        "rawTradeStatusCode": 13,
    })
}

/// `{total, diff}` of the requested codes (client order, unknown codes left out),
/// or of the whole market when `codes` is absent.
fn stock_list(codes: Option<&str>, now: DateTime<Utc>) -> Value {
    let rows: Vec<Value> = match codes {
        Some(codes) => codes
            .split(',')
            .filter_map(|c| stock(c.trim()).ok())
            .map(|s| quote_row(s, now))
            .collect(),
        None => universe()
            .stocks
            .iter()
            .map(|s| quote_row(s, now))
            .collect(),
    };
    json!({ "total": rows.len(), "diff": rows })
}

/// Most search hits answered.
const SEARCH_LIMIT: usize = 20;

fn search(keyword: &str) -> Value {
    let hits: Vec<Value> = universe()
        .stocks
        .iter()
        .filter(|s| {
            !keyword.is_empty() && (s.code.starts_with(keyword) || s.name.contains(keyword))
        })
        .take(SEARCH_LIMIT)
        .map(|s| json!({ "code": s.code, "name": s.name, "market": s.exchange.market() }))
        .collect();
    json!({ "list": hits })
}

/// The valuation row of `/stock/indicator/realtime/{code}`: plain floats, no price.
fn indicator(s: &Stock, now: DateTime<Utc>) -> Value {
    let q = market::quote(security(s), s.limit(), now);
    let v = company::valuation(s, q.price, market::trading_date(now));
    json!([{
        "code": s.code,
        "secucode": s.full_code(),
        "peDynamic": r2(v.pe_dynamic),
        "peStatic": r2(v.pe_static),
        "peTtm": r2(v.pe_ttm),
        "pbNewNotice": r2(v.pb),
        "totalMarketCap": v.market_cap.round() as i64,
    }])
}

/// `{list: [{code, name}]}`.
fn list(items: impl Iterator<Item = (String, String)>) -> Value {
    let list: Vec<Value> = items
        .map(|(code, name)| json!({ "code": code, "name": name }))
        .collect();
    json!({ "list": list })
}

fn stock_kline(call: &Call, now: DateTime<Utc>) -> Answer {
    let code = call.query.required("code")?;
    let listing = a_share(code)
        .or_else(|| abroad(code))
        .ok_or_else(|| Refusal::NotFound(format!("Stock {code} not found")))?;
    kline(call, &listing, now)
}

/// An A-share code the K-line knows: a stock, an ETF or an index (`000001.SH` is the
/// SSE Composite, `000001` the bank).
fn a_share(code: &str) -> Option<Listing<'static>> {
    let digits = code_digits(code)?;
    let shanghai_index =
        code.len() > 6 && code[7..].eq_ignore_ascii_case("SH") && digits.starts_with("000");
    let index = || {
        super::market::index(digits).map(|(code, market, name, security)| Listing {
            code,
            market,
            name,
            decimals: 2,
            security,
            limit: 0.1,
            venue: Venue::China,
        })
    };
    if shanghai_index {
        return index();
    }
    if let Some(s) = universe().stock(digits) {
        return Some(Listing {
            code: &s.code,
            market: s.exchange.market(),
            name: &s.name,
            decimals: 2,
            security: security(s),
            limit: s.limit(),
            venue: Venue::China,
        });
    }
    if let Some(e) = universe().etf(digits) {
        return Some(super::fund::listing(e));
    }
    index()
}

/// An HK code (five digits, or the documented secid `116.00700`) or a US secid the
/// K-line knows.
fn abroad(code: &str) -> Option<Listing<'static>> {
    let hk_digits = code.strip_prefix("116.").unwrap_or(code);
    if let Some(s) = universe().hk(hk_digits) {
        return Some(Listing {
            code: &s.code,
            market: 116,
            name: &s.name,
            decimals: 3,
            security: Security {
                seed: s.seed,
                base_price: s.base_price,
                listed: s.listed,
                shares_wan: s.shares_wan,
            },
            // No daily limit in Hong Kong: a wide bound on the walk.
            limit: 0.5,
            venue: Venue::HongKong,
        });
    }
    let &(code, market, name) = US.iter().find(|(c, _, _)| c.eq_ignore_ascii_case(code))?;
    let seed = crate::universe::seed_of(code);
    Some(Listing {
        code,
        market,
        name,
        decimals: 3,
        security: Security {
            seed,
            base_price: 20.0 + (seed % 300) as f64,
            listed: NaiveDate::from_ymd_opt(2004, 6, 16).unwrap_or(NaiveDate::MIN),
            shares_wan: 900_000.0,
        },
        // No daily limit in New York either.
        limit: 0.5,
        venue: Venue::NewYork,
    })
}

/// The US secids the simulated K-line knows, with Eastmoney's market number (105
/// NASDAQ, 106 NYSE).
const US: &[(&str, u8, &str)] = &[
    ("105.AAPL", 105, "苹果"),
    ("105.MSFT", 105, "微软"),
    ("105.NVDA", 105, "英伟达"),
    ("106.BABA", 106, "阿里巴巴"),
    ("106.TSM", 106, "台积电"),
];
