//! The simulated answers: for each catalogue endpoint, a deterministic payload of a
//! realistic shape and size (same request, same day, same answer; quotes move with
//! time). Requests arrive validated by the same catalogue as the proxy's.

use chrono::{DateTime, Datelike, Duration as Days, NaiveDate, Utc};
use serde_json::{Value, json};

use super::market::{self, Adjust, Security};
use super::universe::{
    Etf, INDEX_NAMES, INDUSTRIES, REGIONS, STYLES, Stock, rng, seed_of, universe,
};
use crate::api::catalog::MACRO_INDICATORS;
use crate::api::params::Valid;

/// Why the simulator has no answer.
#[derive(Debug)]
pub enum Miss {
    /// An identifier the universe does not hold (answered 404).
    NotFound(String),
}

type Answer = Result<Value, Miss>;

/// Builds the `data` payload for a validated request at `now`.
pub fn answer(valid: &Valid, now: DateTime<Utc>) -> Answer {
    let path = valid.endpoint.path.as_str();
    let q = |name: &str| valid.query_value(name).map(|v| v.into_owned());
    let qi = |name: &str, default: i64| q(name).and_then(|v| v.parse().ok()).unwrap_or(default);
    let id = || {
        let p = valid.target.split('?').next().unwrap_or_default();
        p.rsplit('/').next().unwrap_or_default().to_owned()
    };
    let today = market::trading_date(now);
    match path {
        "/news/overview" => Ok(news_overview(today)),
        "/news/mainline" => Ok(mainline(today)),
        "/news/topic/library/list" => Ok(topic_list()),
        "/news/topic/library/detail/{themeId}" => topic_detail(&id()),
        "/news/topic/library/stocks/{themeId}" => topic_stocks(&id(), now),
        "/news/headlines" => Ok(headlines(&q("keyword").unwrap_or_default(), qi("page", 0), qi("pageSize", 10), today)),
        "/news/feed" => Ok(feed(q("cursor"), now)),
        "/stock/list" => Ok(stock_list(q("codes"), now)),
        "/stock/detail/{code}" => stock(&id()).map(|s| stock_detail(s, now)),
        "/stock/search" => Ok(search(&q("keyword").unwrap_or_default())),
        "/stock/selection" => Ok(selection(&q("filter").unwrap_or_default(), qi("page", 1), qi("pageSize", 50), now)),
        "/stock/kline" => {
            let code = q("code").unwrap_or_default();
            let s = stock(&code)?;
            Ok(kline(&s.full_code(), &s.name, security(s), today, valid))
        }
        "/stock/indicator/realtime/{code}" => stock(&id()).map(|s| quote_json(s, now)),
        "/stock/indicator/realtime/sse" => Ok(Value::Null),
        "/stock/indicator/financial/{code}" => stock(&id()).map(|s| financial(s, today)),
        "/stock/business/main/{code}" => stock(&id()).map(business),
        "/stock/industry/list" => Ok(board_list(INDUSTRIES.iter().copied(), "BK04", now)),
        "/stock/area/list" => Ok(board_list(REGIONS.iter().copied(), "BK01", now)),
        "/stock/concept/list" => Ok(board_list(universe().concepts.iter().map(String::as_str), "BK06", now)),
        "/stock/style/list" => Ok(board_list(STYLES.iter().copied(), "BK08", now)),
        "/stock/shareholder/research/{code}" => stock(&id()).map(|s| holders(s, &q("endDate").unwrap_or_default())),
        "/stock/shareholder/list" => Ok(holder_positions(&q("code").unwrap_or_default(), &q("endDate").unwrap_or_default())),
        "/stock/shareholder/research/latest/{code}" | "/stock/performance/ten-years/latest/{code}" => {
            stock(&id()).map(|s| json!({ "code": s.full_code(), "latestDate": last_report_date(today).to_string() }))
        }
        "/stock/earnings-forecast" => Ok(forecasts(&q("reportDate").unwrap_or_else(|| last_report_date(today).to_string()), qi("page", 1), qi("pageSize", 20))),
        "/stock/performance/ten-years" => Ok(ten_years(&q("industryName").unwrap_or_default(), qi("year", i64::from(today.year()) - 1))),
        "/stock/board/info/{code}" | "/stock/industry/info/{code}" => stock(&id()).map(|s| boards(s, now)),
        "/stock/diagnosis/comprehensive/{code}"
        | "/stock/diagnosis/message/{code}"
        | "/stock/diagnosis/financial/evaluation/{code}"
        | "/stock/diagnosis/financial/portrait/{code}" => stock(&id()).map(|s| diagnosis(s, path, today)),
        "/stock/news" => Ok(stock_news(&q("code").unwrap_or_default(), qi("pageIndex", 1), qi("pageSize", 20), today)),
        "/stock/theme/core/{code}" => stock(&id()).map(core_themes),
        "/fund/all-etf-list" => Ok(json!({ "total": universe().etfs.len(), "list": universe().etfs.iter().map(|e| etf_row(e, now)).collect::<Vec<_>>() })),
        "/fund/detail/{code}" => etf(&id()).map(|e| etf_detail(e, now)),
        "/fund/selection" => Ok(etf_selection(&q("filter").unwrap_or_default(), now)),
        "/fund/kline" => {
            let code = q("code").unwrap_or_default();
            let e = etf(&code)?;
            Ok(kline(&e.full_code(), &e.name, etf_security(e), today, valid))
        }
        "/fund/holdings/{code}" => etf(&id()).map(|e| etf_holdings(e, now)),
        "/fund/asset-allocation/{code}" => etf(&id()).map(asset_allocation),
        "/fund/industry-allocation/{code}" => etf(&id()).map(industry_allocation),
        "/fund/transactions/{code}" => etf(&id()).map(|e| transactions(e, today)),
        "/fund/following-index/{code}" => etf(&id()).map(|e| json!({ "code": e.full_code(), "indexName": INDEX_NAMES[e.index], "indexCode": format!("{:06}", 930_000 + e.index), "trackingError": 0.05 + (e.seed % 30) as f64 / 100.0 })),
        "/fund/valuation-analysis/{code}" => etf(&id()).map(|e| valuation(e, today)),
        "/market/indices" => Ok(indices(now)),
        "/market/flow" | "/market/flow/list" => Ok(flow(&q("type").unwrap_or_else(|| "2".into()), path.ends_with("/list"), now)),
        "/market/hotmap" => Ok(hotmap(now)),
        "/market/fund-analysis" => Ok(fund_analysis(today)),
        "/market/global-index" => Ok(global_indices(now)),
        other => macro_answer(other, qi("page", 1), qi("pageSize", 20), today),
    }
}

fn stock(code: &str) -> Result<&'static Stock, Miss> {
    universe()
        .stock(code)
        .ok_or_else(|| Miss::NotFound(format!("no stock with code {code}")))
}

fn etf(code: &str) -> Result<&'static Etf, Miss> {
    universe()
        .etf(code)
        .ok_or_else(|| Miss::NotFound(format!("no fund with code {code}")))
}

fn security(s: &Stock) -> Security {
    Security {
        seed: s.seed,
        base_price: s.base_price,
        listed: s.listed,
        shares_wan: s.shares_wan,
    }
}

fn etf_security(e: &Etf) -> Security {
    Security {
        seed: e.seed,
        base_price: e.base_price,
        listed: e.listed,
        shares_wan: 500_000.0,
    }
}

fn r2(v: f64) -> f64 {
    (v * 100.0).round() / 100.0
}

fn quote_json(s: &Stock, now: DateTime<Utc>) -> Value {
    market::quote(security(s), s.limit(), now).to_json(&s.full_code(), &s.name)
}

/// One stock row of a list: identity plus the live quote.
fn stock_row(s: &Stock, now: DateTime<Utc>) -> Value {
    let q = market::quote(security(s), s.limit(), now);
    let mut v = q.to_json(&s.full_code(), &s.name);
    v["industry"] = INDUSTRIES[s.industry].into();
    v["region"] = REGIONS[s.region].into();
    v["marketCap"] = r2(q.price * s.shares_wan * 10_000.0).into();
    v["pe"] = r2(8.0 + (s.seed % 600) as f64 / 10.0).into();
    v
}

fn news_overview(today: NaiveDate) -> Value {
    let mut r = rng(seed_of("overview") ^ today.num_days_from_ce() as u64);
    json!({
        "date": today.to_string(),
        "summary": "两市成交额维持万亿以上，科技成长板块活跃，北向资金小幅净流入。",
        "upCount": r.u32(1500..4000), "downCount": r.u32(1000..3500), "limitUp": r.u32(30..150), "limitDown": r.u32(0..40),
        "turnover": r2(8_000.0 + r.f64() * 8_000.0),
        "hotSectors": INDUSTRIES.iter().skip(r.usize(..40)).take(5).collect::<Vec<_>>(),
    })
}

fn mainline(today: NaiveDate) -> Value {
    let mut r = rng(seed_of("mainline") ^ today.num_days_from_ce() as u64);
    let concepts = &universe().concepts;
    let themes: Vec<Value> = (0..10)
        .map(|i| {
            let c = &concepts[r.usize(..concepts.len())];
            json!({ "rank": i + 1, "theme": c, "heat": r.u32(50..100), "reason": format!("{c}方向政策催化与资金共振"), "leaders": (0..3).map(|_| universe().stocks[r.usize(..universe().stocks.len())].name.clone()).collect::<Vec<_>>() })
        })
        .collect();
    json!({ "date": today.to_string(), "themes": themes })
}

fn topic_list() -> Value {
    let list: Vec<Value> = universe()
        .concepts
        .iter()
        .enumerate()
        .take(120)
        .map(|(i, c)| json!({ "themeId": format!("T{}", 1000 + i), "name": c, "category": (["科技", "消费", "周期", "医药", "金融"][i % 5]) }))
        .collect();
    json!({ "total": list.len(), "list": list })
}

fn theme_index(id: &str) -> Result<usize, Miss> {
    id.strip_prefix('T')
        .and_then(|n| n.parse::<usize>().ok())
        .and_then(|n| n.checked_sub(1000))
        .filter(|&i| i < 120)
        .ok_or_else(|| Miss::NotFound(format!("no theme {id}")))
}

fn topic_detail(id: &str) -> Answer {
    let i = theme_index(id)?;
    let name = &universe().concepts[i];
    Ok(
        json!({ "themeId": id, "name": name, "description": format!("{name}主题：围绕{name}产业链上下游的投资机会梳理。"), "stockCount": 20 + i % 40, "createdAt": "2019-03-01" }),
    )
}

fn topic_stocks(id: &str, now: DateTime<Utc>) -> Answer {
    let i = theme_index(id)?;
    let stocks: Vec<Value> = universe()
        .stocks
        .iter()
        .filter(|s| s.concepts.contains(&i))
        .take(60)
        .map(|s| stock_row(s, now))
        .collect();
    Ok(json!({ "themeId": id, "stocks": stocks }))
}

fn page<T>(items: Vec<T>, page: i64, size: i64, first: i64) -> (usize, Vec<T>) {
    let total = items.len();
    let skip = ((page - first).max(0) * size) as usize;
    (
        total,
        items.into_iter().skip(skip).take(size as usize).collect(),
    )
}

fn headlines(keyword: &str, page_no: i64, size: i64, today: NaiveDate) -> Value {
    let mut r = rng(seed_of(keyword));
    let items: Vec<Value> = (0..200)
        .map(|i| {
            let day = today - Days::days(i / 4);
            json!({ "id": format!("H{}{}", day.format("%Y%m%d"), i % 4), "date": day.to_string(), "title": format!("{keyword}：{}", ["推动高质量发展", "部署重点工作", "扩大内需", "科技创新", "稳就业稳物价"][r.usize(..5)]), "summary": "会议强调，要坚持稳中求进工作总基调，完整准确全面贯彻新发展理念。" })
        })
        .collect();
    let (total, list) = page(items, page_no, size, 0);
    json!({ "keyword": keyword, "page": page_no, "pageSize": size, "total": total, "list": list })
}

/// Seconds between two flash-news items.
const FEED_EVERY_SECS: i64 = 90;
/// Items per feed page.
const FEED_PAGE: i64 = 20;

fn feed(cursor: Option<String>, now: DateTime<Utc>) -> Value {
    let newest = now.timestamp() / FEED_EVERY_SECS;
    let start = cursor
        .and_then(|c| c.parse::<i64>().ok())
        .map_or(newest, |c| c.clamp(0, newest));
    let stocks = &universe().stocks;
    let items: Vec<Value> = (0..FEED_PAGE)
        .map(|k| {
            let n = start - k;
            let s = &stocks[(n.unsigned_abs() as usize * 7) % stocks.len()];
            let at = DateTime::from_timestamp(n * FEED_EVERY_SECS, 0).unwrap_or(now);
            json!({ "id": n.to_string(), "time": at.to_rfc3339(), "title": format!("{}：{}", s.name, ["发布业绩快报", "获机构调研", "签订重大合同", "股东增持", "回购进展公告"][n.rem_euclid(5) as usize]), "stocks": [s.full_code()] })
        })
        .collect();
    json!({ "list": items, "nextCursor": (start - FEED_PAGE).to_string() })
}

fn stock_list(codes: Option<String>, now: DateTime<Utc>) -> Value {
    let rows: Vec<Value> = match codes {
        Some(codes) => codes
            .split(',')
            .filter_map(|c| universe().stock(c))
            .map(|s| stock_row(s, now))
            .collect(),
        None => universe()
            .stocks
            .iter()
            .map(|s| stock_row(s, now))
            .collect(),
    };
    json!({ "total": rows.len(), "list": rows })
}

fn stock_detail(s: &Stock, now: DateTime<Utc>) -> Value {
    let mut v = stock_row(s, now);
    v["exchange"] = s.exchange.suffix().into();
    v["listingDate"] = s.listed.to_string().into();
    v["totalShares"] = (s.shares_wan * 10_000.0).round().into();
    v["concepts"] = s
        .concepts
        .iter()
        .map(|&c| universe().concepts[c].clone())
        .collect::<Vec<_>>()
        .into();
    v["business"] = format!("主营{}相关产品的研发、生产和销售", INDUSTRIES[s.industry]).into();
    v
}

fn search(keyword: &str) -> Value {
    let hits: Vec<Value> = universe()
        .stocks
        .iter()
        .filter(|s| !keyword.is_empty() && (s.code.contains(keyword) || s.name.contains(keyword)))
        .take(50)
        .map(|s| json!({ "code": s.full_code(), "name": s.name, "exchange": s.exchange.suffix(), "industry": INDUSTRIES[s.industry] }))
        .collect();
    json!({ "keyword": keyword, "list": hits })
}

fn matches_filter(s: &Stock, filter: &str) -> bool {
    filter
        .split([' ', ',', ';'])
        .filter(|t| !t.is_empty())
        .all(|t| {
            s.name.contains(t)
                || INDUSTRIES[s.industry] == t
                || REGIONS[s.region].starts_with(t)
                || s.concepts.iter().any(|&c| universe().concepts[c] == t)
                || s.styles.iter().any(|&c| STYLES[c] == t)
        })
}

fn selection(filter: &str, page_no: i64, size: i64, now: DateTime<Utc>) -> Value {
    let matching: Vec<&Stock> = universe()
        .stocks
        .iter()
        .filter(|s| matches_filter(s, filter))
        .collect();
    let (total, rows) = page(matching, page_no, size, 1);
    json!({ "filter": filter, "page": page_no, "pageSize": size, "total": total, "list": rows.into_iter().map(|s| stock_row(s, now)).collect::<Vec<_>>() })
}

fn kline(code: &str, name: &str, sec: Security, today: NaiveDate, valid: &Valid) -> Value {
    let period = valid
        .query_value("period")
        .map_or_else(|| "day".to_owned(), |v| v.into_owned());
    let fqt = valid
        .query_value("fqt")
        .map_or_else(|| "pre".to_owned(), |v| v.into_owned());
    let rows = market::kline_rows(sec, today, &period, Adjust::from_fqt(&fqt));
    json!({ "code": code, "name": name, "period": period, "fqt": fqt, "klines": rows })
}

fn last_report_date(today: NaiveDate) -> NaiveDate {
    let y = today.year();
    [(y, 9, 30), (y, 6, 30), (y, 3, 31), (y - 1, 12, 31)]
        .into_iter()
        .filter_map(|(y, m, d)| NaiveDate::from_ymd_opt(y, m, d))
        .find(|d| *d + Days::days(45) <= today)
        .unwrap_or_else(|| NaiveDate::from_ymd_opt(y - 1, 9, 30).expect("a real date"))
}

fn report_dates(today: NaiveDate, n: usize) -> Vec<NaiveDate> {
    let mut d = last_report_date(today);
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(d);
        let (y, m) = (d.year(), d.month());
        d = match m {
            12 => NaiveDate::from_ymd_opt(y, 9, 30),
            9 => NaiveDate::from_ymd_opt(y, 6, 30),
            6 => NaiveDate::from_ymd_opt(y, 3, 31),
            _ => NaiveDate::from_ymd_opt(y - 1, 12, 31),
        }
        .expect("quarter ends are real dates");
    }
    out
}

fn financial(s: &Stock, today: NaiveDate) -> Value {
    let mut r = rng(s.seed ^ 0xF1);
    let rows: Vec<Value> = report_dates(today, 12)
        .into_iter()
        .map(|d| {
            let revenue = s.shares_wan * (0.5 + r.f64() * 3.0);
            json!({ "reportDate": d.to_string(), "revenue": r2(revenue), "netProfit": r2(revenue * (r.f64() * 0.3 - 0.03)), "eps": r2(r.f64() * 3.0), "roe": r2(r.f64() * 25.0), "grossMargin": r2(10.0 + r.f64() * 60.0), "debtRatio": r2(20.0 + r.f64() * 60.0), "revenueYoy": r2(r.f64() * 60.0 - 20.0) })
        })
        .collect();
    json!({ "code": s.full_code(), "name": s.name, "list": rows })
}

fn business(s: &Stock) -> Value {
    let mut r = rng(s.seed ^ 0xB5);
    let parts: Vec<Value> = (0..r.usize(2..6))
        .map(|i| json!({ "item": format!("{}产品线{}", INDUSTRIES[s.industry], i + 1), "revenue": r2(r.f64() * 1e9), "ratio": r2(r.f64() * 50.0), "grossMargin": r2(r.f64() * 60.0) }))
        .collect();
    json!({ "code": s.full_code(), "byProduct": parts, "byRegion": [{ "item": "境内", "ratio": 82.5 }, { "item": "境外", "ratio": 17.5 }] })
}

fn board_list<'a>(names: impl Iterator<Item = &'a str>, prefix: &str, now: DateTime<Utc>) -> Value {
    let list: Vec<Value> = names
        .enumerate()
        .map(|(i, name)| {
            let sec = Security { seed: seed_of(name), base_price: 1_000.0, listed: NaiveDate::from_ymd_opt(2010, 1, 4).expect("a real date"), shares_wan: 1e6 };
            let q = market::quote(sec, 0.1, now);
            json!({ "code": format!("{prefix}{i:02}"), "name": name, "changePercent": r2(q.pct()), "upCount": (sec.seed % 40) + 5, "downCount": (sec.seed % 30) + 3 })
        })
        .collect();
    json!({ "total": list.len(), "list": list })
}

fn holders(s: &Stock, end_date: &str) -> Value {
    let mut r = rng(s.seed ^ seed_of(end_date));
    let names = [
        "香港中央结算有限公司",
        "中国证券金融股份有限公司",
        "中央汇金资产管理有限责任公司",
        "全国社保基金一一八组合",
        "华夏上证50ETF",
        "易方达沪深300ETF",
        "中国人寿保险股份有限公司",
        "国新投资有限公司",
        "招商银行股份有限公司-基金",
        "大成基金-农业银行",
    ];
    let list: Vec<Value> = names
        .iter()
        .enumerate()
        .map(|(i, n)| json!({ "rank": i + 1, "holderName": n, "holderCode": format!("8001{:04}", seed_of(n) % 10_000), "shares": (s.shares_wan * 10_000.0 * (0.1 - i as f64 * 0.008) * (0.8 + r.f64() * 0.4)).round(), "ratio": r2(10.0 - i as f64 * 0.8), "change": (["新进", "增加", "减少", "不变"][r.usize(..4)]) }))
        .collect();
    json!({ "code": s.full_code(), "endDate": end_date, "list": list })
}

fn holder_positions(holder: &str, end_date: &str) -> Value {
    let mut r = rng(seed_of(holder) ^ seed_of(end_date));
    let stocks = &universe().stocks;
    let list: Vec<Value> = (0..r.usize(5..40))
        .map(|_| {
            let s = &stocks[r.usize(..stocks.len())];
            json!({ "code": s.full_code(), "name": s.name, "shares": (s.shares_wan * 100.0 * r.f64()).round(), "ratio": r2(r.f64() * 5.0) })
        })
        .collect();
    json!({ "holderCode": holder, "endDate": end_date, "list": list })
}

fn forecasts(report_date: &str, page_no: i64, size: i64) -> Value {
    let mut r = rng(seed_of(report_date));
    let kinds = [
        "预增", "预减", "扭亏", "首亏", "续盈", "续亏", "略增", "略减",
    ];
    let rows: Vec<Value> = universe()
        .stocks
        .iter()
        .step_by(3)
        .map(|s| json!({ "code": s.full_code(), "name": s.name, "reportDate": report_date, "type": kinds[r.usize(..kinds.len())], "changeLow": r2(r.f64() * 200.0 - 80.0), "changeHigh": r2(r.f64() * 250.0 - 50.0), "reason": "主营业务收入增长，成本费用控制良好" }))
        .collect();
    let (total, list) = page(rows, page_no, size, 1);
    json!({ "reportDate": report_date, "page": page_no, "pageSize": size, "total": total, "list": list })
}

fn ten_years(industry: &str, year: i64) -> Value {
    let mut r = rng(seed_of(industry) ^ year as u64);
    let list: Vec<Value> = universe()
        .stocks
        .iter()
        .filter(|s| industry.is_empty() || INDUSTRIES[s.industry] == industry)
        .take(100)
        .map(|s| json!({ "code": s.full_code(), "name": s.name, "years": (0..10).map(|k| json!({ "year": year - k, "revenueGrowth": r2(r.f64() * 50.0 - 10.0), "roe": r2(r.f64() * 30.0) })).collect::<Vec<_>>() }))
        .collect();
    json!({ "industryName": industry, "year": year, "list": list })
}

fn boards(s: &Stock, now: DateTime<Utc>) -> Value {
    json!({
        "code": s.full_code(),
        "industry": { "name": INDUSTRIES[s.industry], "code": format!("BK04{:02}", s.industry) },
        "region": REGIONS[s.region],
        "concepts": s.concepts.iter().map(|&c| universe().concepts[c].clone()).collect::<Vec<_>>(),
        "styles": s.styles.iter().map(|&c| STYLES[c]).collect::<Vec<_>>(),
        "quote": quote_json(s, now),
    })
}

fn diagnosis(s: &Stock, path: &str, today: NaiveDate) -> Value {
    let mut r = rng(s.seed ^ seed_of(path) ^ today.num_days_from_ce() as u64);
    let kind = path.split('/').rev().nth(1).unwrap_or("comprehensive");
    json!({
        "code": s.full_code(), "name": s.name, "date": today.to_string(), "kind": kind,
        "score": r2(40.0 + r.f64() * 55.0), "rank": r.u32(1..5_400), "beatPercent": r2(r.f64() * 100.0),
        "dimensions": (["技术面", "资金面", "消息面", "行业面", "基本面"].iter().map(|d| json!({ "name": d, "score": r2(r.f64() * 100.0) })).collect::<Vec<_>>()),
        "comment": "短期趋势向好，主力资金小幅流入，估值处于行业中位。",
    })
}

fn stock_news(code: &str, page_no: i64, size: i64, today: NaiveDate) -> Value {
    let name = universe().stock(code).map_or("公司", |s| s.name.as_str());
    let items: Vec<Value> = (0..100)
        .map(|i| json!({ "id": format!("N{}{}", seed_of(code) % 100_000, i), "date": (today - Days::days(i)).to_string(), "title": format!("{name}{}", ["发布公告", "获北向资金增持", "举行业绩说明会", "入选指数样本", "高管增持"][(i % 5) as usize]), "source": "证券时报" }))
        .collect();
    let (total, list) = page(items, page_no, size, 1);
    json!({ "code": code, "pageIndex": page_no, "pageSize": size, "total": total, "list": list })
}

fn core_themes(s: &Stock) -> Value {
    json!({ "code": s.full_code(), "themes": s.concepts.iter().map(|&c| json!({ "name": universe().concepts[c], "reason": format!("公司业务涉及{}", universe().concepts[c]) })).collect::<Vec<_>>() })
}

fn etf_row(e: &Etf, now: DateTime<Utc>) -> Value {
    let q = market::quote(etf_security(e), 0.1, now);
    let mut v = q.to_json(&e.full_code(), &e.name);
    v["trackingIndex"] = INDEX_NAMES[e.index].into();
    v["company"] = e.company.into();
    v
}

fn etf_detail(e: &Etf, now: DateTime<Utc>) -> Value {
    let mut v = etf_row(e, now);
    v["listingDate"] = e.listed.to_string().into();
    v["fundSize"] = r2(1e8 * (1.0 + (e.seed % 500) as f64)).into();
    v["managementFee"] = 0.5.into();
    v["custodianFee"] = 0.1.into();
    v
}

fn etf_selection(filter: &str, now: DateTime<Utc>) -> Value {
    let rows: Vec<Value> = universe()
        .etfs
        .iter()
        .filter(|e| {
            filter.is_empty() || e.name.contains(filter) || INDEX_NAMES[e.index].contains(filter)
        })
        .take(200)
        .map(|e| etf_row(e, now))
        .collect();
    json!({ "filter": filter, "total": rows.len(), "list": rows })
}

fn etf_holdings(e: &Etf, now: DateTime<Utc>) -> Value {
    let mut r = rng(e.seed ^ 0x401D);
    let stocks = &universe().stocks;
    let list: Vec<Value> = (0..50)
        .map(|i| {
            let s = &stocks[r.usize(..stocks.len())];
            json!({ "rank": i + 1, "code": s.full_code(), "name": s.name, "weight": r2(8.0 / (1.0 + i as f64 * 0.3)), "shares": (r.f64() * 1e7).round(), "price": quote_json(s, now)["price"] })
        })
        .collect();
    json!({ "code": e.full_code(), "stocks": list, "bonds": [] })
}

fn asset_allocation(e: &Etf) -> Value {
    let stock = 90.0 + (e.seed % 90) as f64 / 10.0;
    json!({ "code": e.full_code(), "stock": r2(stock), "bond": 0.0, "cash": r2(100.0 - stock - 0.3), "other": 0.3 })
}

fn industry_allocation(e: &Etf) -> Value {
    let mut r = rng(e.seed ^ 0x1A);
    json!({ "code": e.full_code(), "list": (0..10).map(|_| json!({ "industry": INDUSTRIES[r.usize(..INDUSTRIES.len())], "weight": r2(r.f64() * 20.0) })).collect::<Vec<_>>() })
}

fn transactions(e: &Etf, today: NaiveDate) -> Value {
    let mut r = rng(e.seed ^ 0x7A);
    let stocks = &universe().stocks;
    let list: Vec<Value> = report_dates(today, 8)
        .into_iter()
        .flat_map(|d| {
            let picks: Vec<Value> = (0..5).map(|_| {
                let s = &stocks[r.usize(..stocks.len())];
                json!({ "reportDate": d.to_string(), "code": s.full_code(), "name": s.name, "action": (["买入", "卖出"][r.usize(..2)]), "amount": r2(r.f64() * 1e8) })
            }).collect();
            picks
        })
        .collect();
    json!({ "code": e.full_code(), "list": list })
}

fn valuation(e: &Etf, today: NaiveDate) -> Value {
    let mut r = rng(e.seed ^ today.num_days_from_ce() as u64);
    json!({ "code": e.full_code(), "date": today.to_string(), "pe": r2(8.0 + r.f64() * 40.0), "pb": r2(0.8 + r.f64() * 5.0), "pePercentile": r2(r.f64() * 100.0), "pbPercentile": r2(r.f64() * 100.0), "dividendYield": r2(r.f64() * 5.0), "level": (["低估", "适中", "高估"][r.usize(..3)]) })
}

const INDICES: &[(&str, &str, f64)] = &[
    ("000001.SH", "上证指数", 3_200.0),
    ("399001.SZ", "深证成指", 10_500.0),
    ("399006.SZ", "创业板指", 2_100.0),
    ("000688.SH", "科创50", 1_000.0),
    ("899050.BJ", "北证50", 1_200.0),
    ("000300.SH", "沪深300", 3_900.0),
    ("000016.SH", "上证50", 2_700.0),
    ("000905.SH", "中证500", 5_800.0),
    ("000852.SH", "中证1000", 6_100.0),
    ("399005.SZ", "中小100", 6_400.0),
    ("000903.SH", "中证100", 3_800.0),
    ("932000.SH", "中证2000", 2_300.0),
];

fn index_quotes(list: &[(&str, &str, f64)], now: DateTime<Utc>) -> Vec<Value> {
    list.iter()
        .map(|&(code, name, base)| {
            let sec = Security {
                seed: seed_of(code),
                base_price: base,
                listed: NaiveDate::from_ymd_opt(2005, 1, 4).expect("a real date"),
                shares_wan: 1e8,
            };
            market::quote(sec, 0.1, now).to_json(code, name)
        })
        .collect()
}

fn indices(now: DateTime<Utc>) -> Value {
    json!({ "list": index_quotes(INDICES, now) })
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
    ("SENSEX", "印度SENSEX", 80_000.0),
    ("TWII", "台湾加权", 22_000.0),
    ("AS51", "澳洲标普200", 8_200.0),
    ("STI", "新加坡海峡时报", 3_700.0),
];

fn global_indices(now: DateTime<Utc>) -> Value {
    json!({ "list": index_quotes(GLOBAL, now) })
}

fn flow(kind: &str, detailed: bool, now: DateTime<Utc>) -> Value {
    let names: Vec<&str> = match kind {
        "1" => REGIONS.to_vec(),
        "3" => universe().concepts.iter().map(String::as_str).collect(),
        _ => INDUSTRIES.to_vec(),
    };
    let minute = now.timestamp() / 60;
    let list: Vec<Value> = names
        .iter()
        .map(|n| {
            let mut r = rng(seed_of(n) ^ minute as u64);
            let main = r.f64() * 4e9 - 2e9;
            let mut v = json!({ "name": n, "mainNetInflow": r2(main), "changePercent": r2(r.f64() * 6.0 - 3.0) });
            if detailed {
                v["superLarge"] = r2(main * 0.6).into();
                v["large"] = r2(main * 0.4).into();
                v["medium"] = r2(-main * 0.3).into();
                v["small"] = r2(-main * 0.7).into();
                v["leader"] = universe().stocks[r.usize(..universe().stocks.len())].name.clone().into();
            }
            v
        })
        .collect();
    json!({ "type": kind, "list": list })
}

fn hotmap(now: DateTime<Utc>) -> Value {
    let u = universe();
    let rows: Vec<String> = u
        .stocks
        .iter()
        .map(|s| {
            let q = market::quote(security(s), s.limit(), now);
            let tags = if s.code.starts_with("60") {
                ",hsj,sh,hs300,"
            } else {
                ",hsj,sz,"
            };
            format!(
                "{}|{}|{}|{}|{tags}|5|{}|8|{}|65|{}|{}|{}|{:.2}|34|{}|{}|{}|178",
                s.industry,
                s.name,
                s.exchange.market(),
                s.code,
                (q.pct() * 100.0).round(),
                (q.turnover * 100.0).round(),
                (q.volume / 100.0).round(),
                (q.open * 100.0).round(),
                (q.high * 100.0).round(),
                q.amount,
                (q.price * 100.0).round(),
                (q.price * s.shares_wan / 10.0).round(),
                (q.price * s.shares_wan / 10.0).round(),
            )
        })
        .collect();
    let hash = format!(
        "{:040x}",
        u128::from(xxhash_rust::xxh3::xxh3_64(rows.concat().as_bytes()))
    );
    json!({ "quotetime": now.timestamp(), "hash": hash, "bk": INDUSTRIES.iter().map(|i| format!("{i}|BK")).collect::<Vec<_>>(), "data": rows })
}

fn fund_analysis(today: NaiveDate) -> Value {
    let mut r = rng(seed_of("fund-analysis") ^ today.num_days_from_ce() as u64);
    let days: Vec<Value> = (0..30)
        .map(|i| json!({ "date": (today - Days::days(i)).to_string(), "northbound": r2(r.f64() * 200.0 - 100.0), "southbound": r2(r.f64() * 150.0 - 50.0), "marginBalance": r2(15_000.0 + r.f64() * 3_000.0), "etfNetSubscription": r2(r.f64() * 100.0 - 30.0) }))
        .collect();
    json!({ "date": today.to_string(), "list": days })
}

/// Macro tables and series, monthly (quarterly for GDP) from 2005 to last month.
fn macro_answer(path: &str, page_no: i64, size: i64, today: NaiveDate) -> Answer {
    let rest = path.strip_prefix("/macro/").unwrap_or_default();
    let (slug, series) = match rest.strip_suffix("/series") {
        Some(slug) => (slug, true),
        None => (rest, false),
    };
    let Some(&(slug, name)) = MACRO_INDICATORS.iter().find(|(s, _)| *s == slug) else {
        return Err(Miss::NotFound(format!("no endpoint {path}")));
    };
    let quarterly = slug == "gdp";
    let mut periods = Vec::new();
    let (mut y, mut m) = (2005, if quarterly { 3 } else { 1 });
    let (ty, tm) = (today.year(), today.month());
    while (y, m) < (ty, tm) {
        periods.push((y, m));
        m += if quarterly { 3 } else { 1 };
        if m > 12 {
            m -= 12;
            y += 1;
        }
    }
    let seed = seed_of(slug);
    let (base, spread) = match slug {
        "pmi" => (50.0, 2.5),
        "cpi" => (101.5, 2.0),
        "ppi" => (100.0, 5.0),
        "gdp" => (6.5, 3.0),
        "lpr" => (4.0, 0.8),
        "currency-supply" => (8.5, 3.5),
        "new-loans" => (15_000.0, 9_000.0),
        "gold-currency" => (32_000.0, 2_000.0),
        _ => (5.0, 6.0),
    };
    let rows: Vec<Value> = periods
        .iter()
        .rev()
        .enumerate()
        .map(|(i, &(y, m))| {
            let x = (y * 12 + m as i32) as f64 / 6.0;
            let v = base + spread * market::smooth(seed, x);
            let mut row = json!({ "date": format!("{y}-{m:02}"), "value": r2(v), "yoy": r2(spread * market::smooth(seed ^ 1, x)), "mom": r2(spread * 0.2 * market::smooth(seed ^ 2, x)) });
            if slug == "currency-supply" {
                row["m0"] = r2(v - 1.0).into();
                row["m1"] = r2(v - 3.0).into();
                row["m2"] = r2(v).into();
            }
            if slug == "lpr" {
                row["lpr1y"] = r2(v).into();
                row["lpr5y"] = r2(v + 0.6).into();
            }
            row["seq"] = i.into();
            row
        })
        .collect();
    if series {
        let dates: Vec<String> = periods.iter().map(|(y, m)| format!("{y}-{m:02}")).collect();
        let values: Vec<Value> = rows.iter().rev().map(|r| r["value"].clone()).collect();
        return Ok(json!({ "indicator": slug, "name": name, "dates": dates, "values": values }));
    }
    let (total, list) = page(rows, page_no, size, 1);
    Ok(
        json!({ "indicator": slug, "name": name, "page": page_no, "pageSize": size, "total": total, "list": list }),
    )
}
