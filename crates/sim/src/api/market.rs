//! Market-wide payloads: index quotes, sector capital flows (`/market/sector-flow/*`;
//! the old `/market/flow?type=` paths are retired and not served), the heat map,
//! capital-side analysis, global indices, the real-time list (A-share and Hong Kong
//! boards) and the trading calendar.

use chrono::{DateTime, Datelike, Duration as Days, NaiveDate, Utc};
use serde_json::{Value, json};

use super::figures::figures;
use super::{BoardKind, board_code, r2, scaled, unrouted};
use crate::market::{self, Security, Venue, is_trading_day};
use crate::request::{Answer, Call, Refusal};
use crate::universe::{Exchange, HkStock, INDUSTRIES, REGIONS, Stock, rng, seed_of, universe};

pub(super) fn answer(call: &Call, now: DateTime<Utc>) -> Answer {
    let q = &call.query;
    match call.template {
        "/market/indices" => Ok(indices(now)),
        "/market/sector-flow/summary" => Ok(flow_summary(&flows(dimension(call)?, now))),
        "/market/sector-flow/list" => {
            let boards = flows(dimension(call)?, now);
            let paging = q.paging(50)?;
            Ok(flow_list(&paging.slice(&boards), boards.len(), now))
        }
        "/market/hotmap" => Ok(hotmap(q.get("quotedata_hash"), now)),
        "/market/fund-analysis" => Ok(fund_analysis(market::trading_date(now))),
        "/market/global-index" => Ok(global_indices(now)),
        "/market/stocks/realtime-list" => realtime_list(call, now),
        "/market/trading-calendar" => calendar(call),
        _ => unrouted(call),
    }
}

/// Major A-share indices: code, market id, name, level at the start.
const INDICES: &[(&str, u8, &str, f64)] = &[
    ("000001", 1, "上证指数", 3_200.0),
    ("399001", 0, "深证成指", 10_500.0),
    ("399006", 0, "创业板指", 2_100.0),
    ("000688", 1, "科创50", 1_000.0),
    ("899050", 0, "北证50", 1_200.0),
    ("000300", 1, "沪深300", 3_900.0),
    ("000016", 1, "上证50", 2_700.0),
    ("000905", 1, "中证500", 5_800.0),
    ("000852", 1, "中证1000", 6_100.0),
    ("932000", 1, "中证2000", 2_300.0),
];

/// An index the K-line knows, by its six digits: its code, Eastmoney market id, name
/// and price path.
pub(super) fn index(digits: &str) -> Option<(&'static str, u8, &'static str, Security)> {
    INDICES
        .iter()
        .find(|(code, ..)| *code == digits)
        .map(|&(code, market, name, base)| (code, market, name, level(code, base)))
}

fn level(seed_text: &str, base: f64) -> Security {
    Security {
        seed: seed_of(seed_text),
        base_price: base,
        listed: NaiveDate::from_ymd_opt(2005, 1, 4).expect("a real date"),
        shares_wan: 1e8,
    }
}

/// `{total, diff}` of index rows, x100 like stock quotes.
fn indices(now: DateTime<Utc>) -> Value {
    let rows: Vec<Value> = INDICES
        .iter()
        .map(|&(code, market_id, name, base)| {
            let q = market::quote(level(code, base), 0.1, now);
            let (price, pre) = (scaled(q.price, 2), scaled(q.pre_close, 2));
            json!({
                "id": 2,
                "newPrice": price,
                "changeRate": ((price as f64 / pre as f64 - 1.0) * 10_000.0).round() as i64,
                "upsDowns": price - pre,
                "code": code,
                "marketId": market_id,
                "name": name,
                "f152": 2,
            })
        })
        .collect();
    json!({ "total": rows.len(), "diff": rows })
}

/// The newer paths' `dimension`: `region | industry | concept`, default industry.
fn dimension(call: &Call) -> Result<BoardKind, Refusal> {
    Ok(
        match call
            .query
            .choice("dimension", &["region", "industry", "concept"], "industry")?
        {
            "region" => BoardKind::Region,
            "concept" => BoardKind::Concept,
            _ => BoardKind::Industry,
        },
    )
}

/// One board's capital flow at an instant; amounts in yuan, ratios in percent.
#[derive(Clone)]
struct Flow {
    code: String,
    name: String,
    price: f64,
    change: f64,
    /// Net inflow by order size: super large, large, medium, small.
    amounts: [i64; 4],
    ratios: [f64; 4],
    leader: &'static Stock,
}

/// Every board of `kind`, largest main (super large + large) inflow first.
fn flows(kind: BoardKind, now: DateTime<Utc>) -> Vec<Flow> {
    let names: Vec<&str> = match kind {
        BoardKind::Region => REGIONS.to_vec(),
        BoardKind::Concept => universe().concepts.iter().map(String::as_str).collect(),
        _ => INDUSTRIES.to_vec(),
    };
    let stocks = &universe().stocks;
    let day = market::trading_date(now).num_days_from_ce() as u64;
    let mut out: Vec<Flow> = names
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let seed = seed_of(name);
            let q = market::quote(level(name, 800.0 + (seed % 2_500) as f64), 0.1, now);
            let mut r = rng(seed ^ day);
            // Money follows the move: the main ratio leans with the change.
            let main = (q.pct() * 1.5 + 4.0 * r.f64() - 2.0).clamp(-15.0, 15.0);
            let ratios = [main * 0.6, main * 0.4, -main * 0.55, -main * 0.45].map(r2);
            let turnover = 2e9 + 4e10 * (seed % 1_000) as f64 / 1_000.0 * (0.3 + q.volume / 1e8);
            Flow {
                code: board_code(kind, i),
                name: (*name).to_owned(),
                price: r2(q.price),
                change: r2(q.pct()),
                amounts: ratios.map(|ratio| (turnover * ratio / 100.0).round() as i64),
                ratios,
                leader: &stocks[(seed % stocks.len() as u64) as usize],
            }
        })
        .collect();
    out.sort_by_key(|f| std::cmp::Reverse(main_amount(f)));
    out
}

fn main_amount(f: &Flow) -> i64 {
    f.amounts[0] + f.amounts[1]
}

/// `{total, diff}` with the main net inflow only (the newer summary's shape).
fn flow_summary(boards: &[Flow]) -> Value {
    let rows: Vec<Value> = boards
        .iter()
        .map(|f| json!({ "code": f.code, "marketId": 90, "name": f.name, "mainNetInflowNetAmount": main_amount(f) }))
        .collect();
    json!({ "total": rows.len(), "diff": rows })
}

/// `{total, diff}` with every order size (the newer list's shape: plain floats, and
/// `mainNetInflowStockName` holding the number 0 as upstream does); `f124` is the
/// quote time in Unix seconds.
fn flow_list(boards: &[Flow], total: usize, now: DateTime<Utc>) -> Value {
    let rows: Vec<Value> = boards
        .iter()
        .map(|f| {
            json!({
                "id": 2,
                "newPrice": f.price,
                "changeRate": f.change,
                "code": f.code,
                "marketId": 90,
                "name": f.name,
                "mainNetInflowNetAmount": main_amount(f),
                "superLargeNetInflowNetAmount": f.amounts[0],
                "superLargeNetInflowRatio": f.ratios[0],
                "largeNetInflowNetAmount": f.amounts[1],
                "largeNetInflowRatio": f.ratios[1],
                "mediumNetInflowNetAmount": f.amounts[2],
                "mediumNetInflowRatio": f.ratios[2],
                "smallNetInflowNetAmount": f.amounts[3],
                "smallNetInflowRatio": f.ratios[3],
                "f124": now.timestamp(),
                "mainNetInflowRatio": r2(f.ratios[0] + f.ratios[1]),
                "mainNetInflowStockName": 0,
                "mainNetInflowStockCode": f.leader.code,
                "f206": 0,
            })
        })
        .collect();
    json!({ "total": total, "diff": rows })
}

/// The whole market's heat map. The upstream's sample is a placeholder (its body was
/// not valid JSON), so this shape is a guess modelled on Eastmoney's heat map: one
/// pipe-separated string per stock, the board list, and a hash of the snapshot. A
/// request carrying the current `quotedata_hash` gets `data: []` (nothing changed).
fn hotmap(known: Option<&str>, now: DateTime<Utc>) -> Value {
    let u = universe();
    let rows: Vec<String> = u.stocks.iter().map(|s| hotmap_row(s, now)).collect();
    let hash = format!(
        "{:016x}",
        twox_hash::XxHash3_64::oneshot(rows.concat().as_bytes())
    );
    let unchanged = known == Some(hash.as_str());
    json!({
        "quotetime": now.timestamp(),
        "hash": hash,
        "bk": INDUSTRIES.iter().enumerate().map(|(i, n)| format!("{}|{n}", board_code(BoardKind::Industry, i))).collect::<Vec<_>>(),
        "data": if unchanged { Vec::new() } else { rows },
    })
}

fn hotmap_row(s: &Stock, now: DateTime<Utc>) -> String {
    let f = figures(s, now);
    let tags = match s.exchange {
        Exchange::Sh => ",hsj,sh,",
        Exchange::Sz => ",hsj,sz,",
        Exchange::Bj => ",bj,",
    };
    let cap = (f.price as f64 * s.shares_wan / 10.0).round();
    format!(
        "{}|{}|{}|{}|{tags}|{}|{}|{}|{}|{}|{}|{cap}",
        board_code(BoardKind::Industry, s.industry),
        s.name,
        s.exchange.market(),
        s.code,
        f.change_rate,
        f.turnover,
        f.volume,
        f.open,
        f.amount,
        f.price,
    )
}

/// A Hong Kong row of the real-time list: the A-share row's keys, prices to the
/// tenth of a cent (x1000, `quoteState152` 3 decimals), on Hong Kong's hours.
fn hk_row(s: &HkStock, now: DateTime<Utc>) -> Value {
    let sec = Security {
        seed: s.seed,
        base_price: s.base_price,
        listed: s.listed,
        shares_wan: s.shares_wan,
    };
    let q = market::quote_at(Venue::HongKong, sec, 0.5, now);
    let milli = |p: f64| scaled(p, 3);
    let (price, pre) = (milli(q.price), milli(q.pre_close));
    let pe = 5.0 + (s.seed % 400) as f64 / 10.0;
    json!({
        "id": 2, "newPrice": price, "changeRate": ((price as f64 / pre.max(1) as f64 - 1.0) * 10_000.0).round() as i64,
        "upsDowns": price - pre, "volume": (q.volume / 100.0).round() as i64, "dealAmount": r2(q.amount),
        "amplitude": scaled((q.high - q.low) / q.pre_close * 100.0, 2), "turnoverRate": scaled(q.turnover, 2),
        "dtsyl": scaled(pe, 2), "volumeRatio": scaled(0.5 + (s.seed % 150) as f64 / 100.0, 2),
        "code": s.code, "marketId": 116, "name": s.name, "highPrice": milli(q.high), "lowPrice": milli(q.low),
        "openPrice": milli(q.open), "preClosePrice": pre, "pbnewmrq": scaled(0.3 + (s.seed % 60) as f64 / 10.0, 2),
        "quoteState152": 3,
    })
}

/// `YYYY/MM/DD 00:00:00`, the slash form this endpoint uses.
fn slashed(day: NaiveDate) -> String {
    format!("{} 00:00:00", day.format("%Y/%m/%d"))
}

/// The trading days before `today`, newest first.
fn trading_days(today: NaiveDate, n: usize) -> Vec<NaiveDate> {
    std::iter::successors(Some(today - Days::days(1)), |d| Some(*d - Days::days(1)))
        .filter(|d| is_trading_day(*d))
        .take(n)
        .collect()
}

fn fund_analysis(today: NaiveDate) -> Value {
    let days = trading_days(today, 30);
    let mut r = rng(seed_of("institution-flow") ^ today.num_days_from_ce() as u64);
    let flows: Vec<i64> = days
        .iter()
        .map(|_| r.i64(-30_000_000_000..50_000_000_000))
        .collect();
    let mut balance = 2_600_000_000_000.0;
    let margins: Vec<(NaiveDate, i64, i64)> = days
        .iter()
        .map(|&d| {
            let change = r.i64(-8_000_000_000..8_000_000_000);
            balance -= change as f64;
            (d, change, balance as i64)
        })
        .collect();
    let streak = |v: &[i64]| v.iter().take_while(|x| x.signum() == v[0].signum()).count();
    let changes: Vec<i64> = margins.iter().map(|m| m.1).collect();
    json!({
        "institutionFlow": {
            "current": flows[0],
            "change": flows[0] - flows[1],
            "cumulative": streak(&flows),
            "history": days.iter().zip(&flows).map(|(d, v)| json!({ "date": slashed(*d), "value": v })).collect::<Vec<_>>(),
        },
        "shanghaiMarginBalance": {
            "current": margins[0].2,
            "change": margins[0].1,
            "cumulative": streak(&changes),
            "history": margins.iter().map(|(d, v, c)| json!({ "date": slashed(*d), "value": v, "cumulative": c })).collect::<Vec<_>>(),
        },
    })
}

const GLOBAL: &[(&str, &str, f64)] = &[
    ("DJIA", "道琼斯", 42_000.0),
    ("NDX", "纳斯达克", 19_000.0),
    ("SPX", "标普500", 5_900.0),
    ("HSI", "恒生指数", 20_000.0),
    ("HSTECH", "恒生科技", 4_500.0),
    ("N225", "日经225", 39_000.0),
    ("KS11", "韩国KOSPI", 2_600.0),
    ("FTSE", "富时100", 8_200.0),
    ("GDAXI", "德国DAX", 19_500.0),
    ("FCHI", "法国CAC40", 7_400.0),
];

/// A source payload passed through: `{list, List, errcode}`. Both lists are empty in
/// the sample, so the element is a guess; this source fills `list` only.
fn global_indices(now: DateTime<Utc>) -> Value {
    let list: Vec<Value> = GLOBAL
        .iter()
        .map(|&(code, name, base)| {
            let q = market::quote(level(code, base), 0.1, now);
            json!({ "code": code, "name": name, "newPrice": r2(q.price), "changeRate": r2(q.pct()), "upsDowns": r2(q.price - q.pre_close) })
        })
        .collect();
    json!({ "list": list, "List": [], "errcode": "0" })
}

/// `/market/stocks/realtime-list?market=&page=&pageSize=`: one board's quotes, paged
/// (50). `market` is required: `cn_a` (all A-shares), `bj`, `cyb` (ChiNext), `kcb`
/// (STAR), `hk` (all Hong Kong), `hk_main` (its main board), `hk_gem` (its GEM).
fn realtime_list(call: &Call, now: DateTime<Utc>) -> Answer {
    let q = &call.query;
    let markets = ["cn_a", "bj", "cyb", "kcb", "hk", "hk_main", "hk_gem"];
    let market_name = q.required_choice("market", &markets)?;
    let paging = q.paging(50)?;
    if let Some(gem) = match market_name {
        "hk" => Some(None),
        "hk_main" => Some(Some(false)),
        "hk_gem" => Some(Some(true)),
        _ => None,
    } {
        let listed: Vec<&HkStock> = universe()
            .hk
            .iter()
            .filter(|s| gem.is_none_or(|gem| s.is_gem() == gem))
            .collect();
        let rows: Vec<Value> = paging
            .slice(&listed)
            .into_iter()
            .map(|s| hk_row(s, now))
            .collect();
        return Ok(json!({ "total": listed.len(), "diff": rows }));
    }
    let member = |s: &&Stock| match market_name {
        "cn_a" => true,
        "bj" => s.exchange == Exchange::Bj,
        "cyb" => s.code.starts_with("30"),
        "kcb" => s.code.starts_with("68"),
        _ => false,
    };
    let stocks: Vec<&Stock> = universe().stocks.iter().filter(member).collect();
    let rows: Vec<Value> = paging
        .slice(&stocks)
        .into_iter()
        .map(|s| realtime_row(s, now))
        .collect();
    Ok(json!({ "total": stocks.len(), "diff": rows }))
}

/// A row of the real-time list, as its docs page shows it (open, high and low
/// included, unlike `/stock/list`).
fn realtime_row(s: &Stock, now: DateTime<Utc>) -> Value {
    let f = figures(s, now);
    json!({
        "id": 2, "newPrice": f.price, "changeRate": f.change_rate, "upsDowns": f.price - f.pre_close,
        "volume": f.volume, "dealAmount": f.amount, "amplitude": f.amplitude, "turnoverRate": f.turnover,
        "dtsyl": f.pe_dynamic, "volumeRatio": f.volume_ratio, "code": s.code, "marketId": s.exchange.market(),
        "name": s.name, "highPrice": f.high, "lowPrice": f.low, "openPrice": f.open,
        "preClosePrice": f.pre_close, "pbnewmrq": f.pb, "quoteState152": 2,
    })
}

/// `/market/trading-calendar?market=CN_A&from=&to=`: a bare array of days. Its docs
/// show one sample row `{market, date, isTradingDay, sessionType}` (2024-01-01,
/// "closed"); "full" for a trading day is a guess. The simulated exchanges close on
/// weekends and the published holidays (2024 to 2027). Only `CN_A` is served; `HK`
/// and `US` answer 400 as documented.
fn calendar(call: &Call) -> Answer {
    let q = &call.query;
    q.required_choice("market", &["CN_A"])?;
    let from = q.date("from")?.ok_or(Refusal::BadRequest)?;
    let to = q.date("to")?.ok_or(Refusal::BadRequest)?;
    let days: Vec<Value> = std::iter::successors(Some(from), |d| Some(*d + Days::days(1)))
        .take_while(|d| *d <= to)
        .map(|d| {
            let open = is_trading_day(d);
            json!({ "market": "CN_A", "date": d.to_string(), "isTradingDay": open, "sessionType": if open { "full" } else { "closed" } })
        })
        .collect();
    Ok(Value::Array(days))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(template: &'static str, q: &str) -> Call {
        Call::of(template, q)
    }

    fn now() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-03-02T02:00:00Z")
            .unwrap()
            .with_timezone(&Utc)
    }

    #[test]
    fn flows_page_by_dimension() {
        let regions = answer(
            &call("/market/sector-flow/summary", "dimension=region"),
            now(),
        )
        .unwrap();
        assert_eq!(regions["total"], REGIONS.len());
        let list = answer(
            &call(
                "/market/sector-flow/list",
                "dimension=concept&page=2&pageSize=10",
            ),
            now(),
        )
        .unwrap();
        assert_eq!(list["diff"].as_array().unwrap().len(), 10);
        assert_eq!(list["total"], universe().concepts.len());
        assert!(answer(&call("/market/sector-flow/summary", "dimension=x"), now()).is_err());
    }

    #[test]
    fn the_calendar_needs_its_parameters() {
        let c = |q| answer(&call("/market/trading-calendar", q), now());
        let week = c("market=CN_A&from=2026-03-02&to=2026-03-08").unwrap();
        let open: Vec<bool> = week
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["isTradingDay"].as_bool().unwrap())
            .collect();
        assert_eq!(open, [true, true, true, true, true, false, false]);
        assert_eq!(
            c("market=HK&from=2026-03-02&to=2026-03-08"),
            Err(Refusal::BadRequest)
        );
        assert_eq!(c("market=CN_A&from=2026-03-02"), Err(Refusal::BadRequest));
    }
}
