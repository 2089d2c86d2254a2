//! `/stock/selection`: Eastmoney's raw screening table with the 141 documented
//! UPPER_SNAKE columns. Identity, quote, valuation and report columns come from the
//! simulated market and reports; signals, holders, flows and momentum are drawn.

use chrono::{DateTime, Datelike, Utc};
use serde_json::{Map, Value, json};

use super::figures::figures;
use super::{int, r2};
use crate::company::{self, free_shares, latest_period, total_shares};
use crate::market;
use crate::request::{Answer, Call};
use crate::universe::{Exchange, INDUSTRIES, REGIONS, STYLES, Stock, province, rng, universe};

/// How a drawn column's value is made.
#[derive(Clone, Copy)]
enum Draw {
    /// A float in `lo..hi`.
    Float(f64, f64),
    /// An integer in `lo..hi`.
    Int(i64, i64),
    /// A float, or null one time in `1 / every`.
    Sparse(f64, f64, u32),
    /// Always null (columns the source leaves empty for most stocks).
    Null,
    /// A technical signal: the string "1" about one time in seven, else "0".
    Signal,
}

use Draw::{Float, Int, Null, Signal, Sparse};

/// The drawn columns, in the documented row's order.
const DRAWN: &[(&str, Draw)] = &[
    ("PETTMDEDUCTED", Float(-60.0, 120.0)),
    ("PS9", Float(0.01, 15.0)),
    ("PCFJYXJL9", Float(-50.0, 80.0)),
    ("PREDICT_PE_SYEAR", Sparse(5.0, 60.0, 3)),
    ("PREDICT_PE_NYEAR", Sparse(4.0, 50.0, 3)),
    ("YCPEG", Sparse(0.05, 3.0, 3)),
    ("ENTERPRISE_VALUE_MULTIPLE", Float(2.0, 60.0)),
    ("PER_NETCASH_OPERATE", Float(-3.0, 5.0)),
    ("PER_FCFE", Float(-5.0, 12.0)),
    ("PER_CAPITAL_RESERVE", Float(0.0, 8.0)),
    ("PER_UNASSIGN_PROFIT", Float(-2.0, 15.0)),
    ("PER_SURPLUS_RESERVE", Float(0.0, 3.0)),
    ("PER_RETAINED_EARNING", Float(-2.0, 18.0)),
    ("JROA", Float(-2.0, 12.0)),
    ("ROIC", Float(-5.0, 25.0)),
    ("ZXGXL", Sparse(0.0, 6.0, 4)),
    ("SALE_GPR", Float(1.0, 80.0)),
    ("SALE_NPR", Float(-10.0, 40.0)),
    ("NETPROFIT_YOY_RATIO", Float(-80.0, 200.0)),
    ("DEDUCT_NETPROFIT_GROWTHRATE", Float(-90.0, 400.0)),
    ("TOI_YOY_RATIO", Float(-40.0, 80.0)),
    ("NETPROFIT_GROWTHRATE_3Y", Float(-60.0, 120.0)),
    ("INCOME_GROWTHRATE_3Y", Float(-30.0, 60.0)),
    ("PREDICT_NETPROFIT_RATIO", Null),
    ("PREDICT_INCOME_RATIO", Null),
    ("BASICEPS_YOY_RATIO", Float(-80.0, 200.0)),
    ("TOTAL_PROFIT_GROWTHRATE", Float(-80.0, 200.0)),
    ("OPERATE_PROFIT_GROWTHRATE", Float(-80.0, 200.0)),
    ("EQUITY_RATIO", Float(0.1, 9.0)),
    ("EQUITY_MULTIPLIER", Float(1.1, 12.0)),
    ("CURRENT_RATIO", Float(0.4, 6.0)),
    ("SPEED_RATIO", Float(0.2, 5.0)),
    ("HOLDER_NEWEST", Int(3_000, 400_000)),
    ("HOLDER_RATIO", Float(-15.0, 15.0)),
    ("HOLD_AMOUNT", Float(10_000.0, 900_000.0)),
    ("AVG_HOLD_NUM", Float(2_000.0, 80_000.0)),
    ("HOLDNUM_GROWTHRATE_3Q", Float(-20.0, 20.0)),
    ("HOLDNUM_GROWTHRATE_HY", Float(-25.0, 25.0)),
    ("HOLD_RATIO_COUNT", Float(20.0, 85.0)),
    ("FREE_HOLD_RATIO", Float(20.0, 85.0)),
    ("MACD_GOLDEN_FORK", Signal),
    ("MACD_GOLDEN_FORKZ", Signal),
    ("MACD_GOLDEN_FORKY", Signal),
    ("KDJ_GOLDEN_FORK", Signal),
    ("KDJ_GOLDEN_FORKZ", Signal),
    ("KDJ_GOLDEN_FORKY", Signal),
    ("BREAK_THROUGH", Signal),
    ("LOW_FUNDS_INFLOW", Signal),
    ("HIGH_FUNDS_OUTFLOW", Signal),
    ("BREAKUP_MA_5DAYS", Signal),
    ("BREAKUP_MA_10DAYS", Signal),
    ("BREAKUP_MA_20DAYS", Signal),
    ("BREAKUP_MA_30DAYS", Signal),
    ("BREAKUP_MA_60DAYS", Signal),
    ("LONG_AVG_ARRAY", Signal),
    ("SHORT_AVG_ARRAY", Signal),
    ("UPPER_LARGE_VOLUME", Signal),
    ("DOWN_NARROW_VOLUME", Signal),
    ("ONE_DAYANG_LINE", Signal),
    ("TWO_DAYANG_LINES", Signal),
    ("RISE_SUN", Signal),
    ("POWER_FULGUN", Signal),
    ("RESTORE_JUSTICE", Signal),
    ("DOWN_7DAYS", Signal),
    ("UPPER_8DAYS", Signal),
    ("UPPER_9DAYS", Signal),
    ("UPPER_4DAYS", Signal),
    ("HEAVEN_RULE", Signal),
    ("UPSIDE_VOLUME", Signal),
    ("ALLCORP_NUM", Int(0, 60)),
    ("ALLCORP_FUND_NUM", Int(0, 40)),
    ("ALLCORP_QS_NUM", Null),
    ("ALLCORP_QFII_NUM", Null),
    ("ALLCORP_BX_NUM", Null),
    ("ALLCORP_SB_NUM", Null),
    ("ALLCORP_XT_NUM", Null),
    ("ALLCORP_RATIO", Float(0.0, 70.0)),
    ("ALLCORP_FUND_RATIO", Float(0.0, 20.0)),
    ("ALLCORP_QS_RATIO", Null),
    ("ALLCORP_QFII_RATIO", Null),
    ("ALLCORP_BX_RATIO", Null),
    ("ALLCORP_SB_RATIO", Null),
    ("ALLCORP_XT_RATIO", Null),
    ("NET_INFLOW", Int(-500_000_000, 500_000_000)),
    ("NETINFLOW_3DAYS", Int(-900_000_000, 900_000_000)),
    ("NETINFLOW_5DAYS", Int(-1_500_000_000, 1_500_000_000)),
    ("NOWINTERST_RATIO", Float(0.0, 30.0)),
    ("NOWINTERST_RATIO_3D", Float(0.0, 30.0)),
    ("NOWINTERST_RATIO_5D", Float(0.0, 30.0)),
    ("DDX", Float(-2.0, 2.0)),
    ("DDX_3D", Float(-2.0, 2.0)),
    ("DDX_5D", Float(-2.0, 2.0)),
    ("DDX_RED_10D", Int(0, 10)),
    ("CHANGERATE_3DAYS", Float(-15.0, 15.0)),
    ("CHANGERATE_5DAYS", Float(-20.0, 20.0)),
    ("CHANGERATE_10DAYS", Float(-30.0, 30.0)),
    ("CHANGERATE_TY", Float(-50.0, 80.0)),
    ("UPNDAY", Int(0, 8)),
    ("DOWNNDAY", Int(0, 8)),
    ("MUTUAL_NETBUY_AMT", Null),
    ("HOLD_RATIO", Float(0.0, 8.0)),
];

/// The indicators the screen is configured with (echoed as `config`).
const CONFIG: &[(&str, &str)] = &[
    ("PE9", "最新一期"),
    ("PBNEWMRQ", "最新一期"),
    ("ROE_WEIGHT", "最新报告期"),
    ("NETPROFIT_YOY_RATIO", "最新报告期"),
    ("TOTAL_MARKET_CAP", "最新一期"),
];

/// One page of the screen: `page` (default 1) and `pageSize` (default 50) over the
/// stocks matching `filter` (words that must each match a name, industry, province,
/// concept or style: the real filter syntax is undocumented).
pub(super) fn selection(call: &Call, now: DateTime<Utc>) -> Answer {
    let filter = call.query.text("filter", "");
    let paging = call.query.paging(50)?;
    let matching: Vec<&Stock> = universe()
        .stocks
        .iter()
        .filter(|s| matches(s, filter))
        .collect();
    let rows: Vec<Value> = paging
        .slice(&matching)
        .into_iter()
        .map(|s| screen_row(s, now))
        .collect();
    let config: Vec<Value> = CONFIG
        .iter()
        .map(|(name, kind)| json!({ "INDICATOR_NAME": name, "DATATYPE": kind }))
        .collect();
    Ok(json!({
        "nextpage": (paging.page * paging.size) < matching.len() as i64,
        "currentpage": paging.page,
        "count": matching.len(),
        "config": config,
        "data": rows,
    }))
}

fn matches(s: &Stock, filter: &str) -> bool {
    let concepts = &universe().concepts;
    filter
        .split([' ', ',', ';'])
        .filter(|t| !t.is_empty())
        .all(|t| {
            s.name.contains(t)
                || INDUSTRIES[s.industry] == t
                || province(s.region).starts_with(t)
                || REGIONS[s.region].starts_with(t)
                || s.concepts.iter().any(|&c| concepts[c] == t)
                || s.styles.iter().any(|&c| STYLES[c] == t)
        })
}

/// The board a stock trades on, as `MARKET` names it.
fn board(s: &Stock) -> &'static str {
    match (s.exchange, &s.code[..2]) {
        (Exchange::Sh, "68") => "上交所科创板",
        (Exchange::Sh, _) => "上交所主板",
        (Exchange::Sz, "30") => "深交所创业板",
        (Exchange::Sz, _) => "深交所主板",
        (Exchange::Bj, _) => "北交所",
    }
}

fn screen_row(s: &Stock, now: DateTime<Utc>) -> Value {
    let today = market::trading_date(now);
    let f = figures(s, now);
    let price = f.price as f64 / 100.0;
    let v = company::valuation(s, price, today);
    let r = company::report(s, latest_period(today));
    let yes = |style: &str| {
        if s.styles.iter().any(|&i| STYLES[i] == style) {
            "是"
        } else {
            "否"
        }
    };
    let fen = |v: i64| v as f64 / 100.0;
    let mut row = json!({
        "MAX_TRADE_DATE": market::last_trading_day(today).to_string(),
        "SECURITY_CODE": s.code,
        "SECURITY_NAME_ABBR": s.name,
        "SECUCODE": s.full_code(),
        "NEW_PRICE": price,
        "CHANGE_RATE": fen(f.change_rate),
        "VOLUME_RATIO": fen(f.volume_ratio),
        "HIGH_PRICE": fen(f.high),
        "LOW_PRICE": fen(f.low),
        "PRE_CLOSE_PRICE": fen(f.pre_close),
        "VOLUME": f.volume,
        "DEAL_AMOUNT": f.amount,
        "TURNOVERRATE": fen(f.turnover),
        "AMPLITUDE": fen(f.amplitude),
        "LISTING_DATE": s.listed.to_string(),
        "INDUSTRY": INDUSTRIES[s.industry],
        "AREA": province(s.region),
        "MARKET": board(s),
        "CONCEPT": s.concepts.iter().map(|&c| universe().concepts[c].clone()).collect::<Vec<_>>(),
        "STYLE": s.styles.iter().map(|&c| STYLES[c]).collect::<Vec<_>>(),
        "IS_HS300": yes("沪深300"),
        "IS_SZ50": yes("上证50"),
        "IS_ZZ500": yes("中证500"),
        "IS_ZZ1000": yes("中证1000"),
        "IS_CY50": if s.code.starts_with("30") && s.seed.is_multiple_of(28) { "是" } else { "否" },
        "PE9": v.pe_dynamic,
        "PE_TTM": v.pe_ttm,
        "PBNEWMRQ": v.pb,
        "TOTAL_MARKET_CAP": int(v.market_cap),
        "FREE_CAP": int(price * free_shares(s)),
        "DTSYL": v.pe_dynamic,
        "BASIC_EPS": (r.eps * 100.0).round() / 100.0,
        "BVPS": r.bps,
        "PARENT_NETPROFIT": r2(r.net_profit),
        "DEDUCT_NETPROFIT": r2(r.eps_deducted * total_shares(s)),
        "TOTAL_OPERATE_INCOME": r2(r.revenue),
        "ROE_WEIGHT": (r.roe * 100.0).round() / 100.0,
        "DEBT_ASSET_RATIO": r.debt_ratio,
        "TOTAL_SHARES": int(total_shares(s)),
        "FREE_SHARES": int(free_shares(s)),
    });
    let fields = row.as_object_mut().expect("a row is an object");
    drawn_columns(s, today.num_days_from_ce(), fields);
    row
}

/// Adds the drawn columns, the same for a stock all day.
fn drawn_columns(s: &Stock, day: i32, fields: &mut Map<String, Value>) {
    let mut r = rng(s.seed ^ (day as u64).wrapping_mul(0x5C4E));
    for &(name, draw) in DRAWN {
        let value = match draw {
            Float(lo, hi) => json!(lo + (hi - lo) * r.f64()),
            Int(lo, hi) => json!(r.i64(lo..hi)),
            Sparse(lo, hi, every) => {
                let v = lo + (hi - lo) * r.f64();
                if r.u32(0..every) == 0 {
                    Value::Null
                } else {
                    json!(v)
                }
            }
            Null => Value::Null,
            Signal => json!(if r.u32(0..7) == 0 { "1" } else { "0" }),
        };
        fields.insert(name.to_owned(), value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_screen_row_has_the_141_documented_columns() {
        let now = DateTime::parse_from_rfc3339("2026-03-02T02:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let row = screen_row(universe().stock("600519").unwrap(), now);
        assert_eq!(row.as_object().unwrap().len(), 141);
        assert_eq!(row["SECUCODE"], "600519.SH");
        assert_eq!(row["MARKET"], "上交所主板");
        assert_eq!(row["MAX_TRADE_DATE"], "2026-03-02");
    }
}
