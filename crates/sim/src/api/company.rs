//! Single-stock company data in the upstream's mapped style (bare arrays of `{code,
//! secucode, name, ...}` rows): financials, business, shareholders, forecasts,
//! ten-year performance, boards, diagnosis, stock news and core themes.

use chrono::{DateTime, Datelike, NaiveDate, Utc};
use serde_json::{Value, json};

use super::{BoardKind, board_code, int, mapped_page, r2, row, stock, unix_at, unrouted};
use crate::company::{Period, latest_period, period_at, periods, report, stamp, total_shares};
use crate::market;
use crate::request::{Answer, Call, Refusal};
use crate::universe::{INDUSTRIES, REGIONS, STYLES, Stock, rng, seed_of, universe};

pub(super) fn answer(call: &Call, now: DateTime<Utc>) -> Answer {
    let today = market::trading_date(now);
    let one = |f: fn(&Stock, NaiveDate) -> Value| stock(call.id()).map(|s| f(s, today));
    match call.template {
        "/stock/indicator/financial/{code}" => one(financial),
        "/stock/business/main/{code}" => one(business),
        "/stock/shareholder/research/{code}" => research(call, today),
        "/stock/shareholder/list" => holder_list(call, today),
        "/stock/shareholder/research/latest/{code}" => one(
            |s, today| json!([{ "secucode": s.full_code(), "endDate": latest_period(today).stamp() }]),
        ),
        "/stock/earnings-forecast" => forecasts(call, today),
        "/stock/performance/ten-years" => ten_years(call, today),
        "/stock/performance/ten-years/latest/{code}" => one(ten_years_latest),
        "/stock/board/info/{code}" => one(|s, _| boards(s)),
        "/stock/industry/info/{code}" => one(|s, _| {
            let boards = json!({ "boardCode": 400 + s.industry, "boardName": INDUSTRIES[s.industry], "industryRank": null });
            json!([row(s, boards)])
        }),
        "/stock/diagnosis/comprehensive/{code}" => one(scores),
        "/stock/diagnosis/message/{code}" => one(message),
        "/stock/diagnosis/financial/evaluation/{code}" => one(evaluation),
        "/stock/diagnosis/financial/portrait/{code}" => one(portrait),
        "/stock/news" => stock_news(call, today),
        "/stock/theme/core/{code}" => one(|s, _| core_themes(s)),
        _ => unrouted(call),
    }
}

/// The latest twelve reports.
fn financial(s: &Stock, today: NaiveDate) -> Value {
    let rows: Vec<Value> = periods(today, 12)
        .into_iter()
        .map(|p| {
            let r = report(s, p);
            row(
                s,
                json!({
                    "reportDate": p.stamp(),
                    "reportType": p.label(),
                    "eps": r.eps,
                    "epsKc": r2(r.eps_deducted),
                    "bps": r.bps,
                    "totalOperateIncome": int(r.revenue),
                    "parentNetProfit": int(r.net_profit),
                    "roeJq": r2(r.roe),
                    "zcfzRatio": r.debt_ratio,
                    "totalShare": int(total_shares(s)),
                    "freeShare": int(crate::company::free_shares(s)),
                }),
            )
        })
        .collect();
    Value::Array(rows)
}

fn business(s: &Stock, _today: NaiveDate) -> Value {
    let industry = INDUSTRIES[s.industry];
    let parts = [
        (
            "经营范围",
            2,
            format!("{industry}相关产品的研发、生产和销售；技术咨询、技术服务；货物及技术进出口。"),
        ),
        (
            "主营业务",
            1,
            format!("公司主要从事{industry}业务，产品覆盖上下游主要环节。"),
        ),
        (
            "产品类型",
            3,
            format!("{industry}核心产品、配套服务及解决方案。"),
        ),
    ];
    Value::Array(
        parts
            .into_iter()
            .map(|(keyword, point, content)| {
                row(s, json!({ "keyword": keyword, "mainPoint": point, "mainPointContent": content, "keyClassif": keyword }))
            })
            .collect(),
    )
}

/// Shareholders the simulated companies draw their top ten from: name, type.
const HOLDERS: &[(&str, &str)] = &[
    ("香港中央结算有限公司", "其它"),
    ("中国证券金融股份有限公司", "其它"),
    ("中央汇金资产管理有限责任公司", "国有法人"),
    ("全国社保基金一一八组合", "社保基金"),
    ("全国社保基金一零三组合", "社保基金"),
    ("华夏上证50交易型开放式指数证券投资基金", "证券投资基金"),
    (
        "易方达沪深300交易型开放式指数发起式证券投资基金",
        "证券投资基金",
    ),
    (
        "华泰柏瑞沪深300交易型开放式指数证券投资基金",
        "证券投资基金",
    ),
    ("南方中证500交易型开放式指数证券投资基金", "证券投资基金"),
    ("中国人寿保险股份有限公司-传统-普通保险产品", "保险公司"),
    ("中国平安人寿保险股份有限公司-自有资金", "保险公司"),
    ("新华人寿保险股份有限公司-分红-个人分红", "保险公司"),
    ("国新投资有限公司", "国有法人"),
    (
        "招商银行股份有限公司-兴全合润混合型证券投资基金",
        "证券投资基金",
    ),
    ("中信证券股份有限公司", "证券公司"),
    ("国泰君安证券股份有限公司", "证券公司"),
    ("高毅晓峰2号致信基金", "私募基金"),
    ("阿布达比投资局", "QFII"),
    ("挪威中央银行-自有资金", "QFII"),
    ("UBS AG", "QFII"),
    (
        "中国工商银行股份有限公司-富国天惠精选成长混合型证券投资基金",
        "证券投资基金",
    ),
    ("基本养老保险基金一零零二组合", "社保基金"),
    ("中国国有企业结构调整基金股份有限公司", "国有法人"),
    ("北京诚通金控投资有限公司", "国有法人"),
];

/// A shareholder's code: `code` of `/stock/shareholder/list` (not a stock code).
fn holder_code(i: usize) -> String {
    (80_010_000 + i).to_string()
}

/// One of the top ten holders of a stock at a period end.
struct Holding {
    rank: usize,
    holder: usize,
    shares: i64,
    ratio: f64,
    change: &'static str,
}

/// The top ten holders of `s` at `p`: all holders (`top10`) or the holders of
/// tradable shares (`top10Float`).
fn top_ten(s: &Stock, p: Period, float: bool) -> Vec<Holding> {
    let mut r = rng(s.seed ^ p.end.num_days_from_ce() as u64 ^ u64::from(float) << 40);
    let base = if float {
        crate::company::free_shares(s)
    } else {
        total_shares(s)
    };
    let mut pool: Vec<usize> = (0..HOLDERS.len()).collect();
    r.shuffle(&mut pool);
    let mut ratio = 5.0 + 40.0 * r.f64();
    pool.into_iter()
        .take(10)
        .enumerate()
        .map(|(i, holder)| {
            let h = Holding {
                rank: i + 1,
                holder,
                shares: int(base * ratio / 100.0),
                ratio,
                change: ["不变", "增加", "减少", "新进"][r.usize(..4)],
            };
            ratio *= 0.45 + 0.5 * r.f64();
            h
        })
        .collect()
}

/// The period an `endDate` names: the quarter end on or before it (the latest
/// published one when absent or later).
fn period_for(end: Option<NaiveDate>, today: NaiveDate) -> Period {
    let latest = latest_period(today);
    match end {
        Some(day) if day < latest.end => period_at(day).unwrap_or_else(|| {
            std::iter::successors(Some(latest), |p| Some(p.previous()))
                .find(|p| p.end <= day)
                .expect("some quarter end precedes any date")
        }),
        _ => latest,
    }
}

/// Top ten holders of tradable shares; `endDate` is required.
fn research(call: &Call, today: NaiveDate) -> Answer {
    let s = stock(call.id())?;
    let end = call.query.date("endDate")?.ok_or(Refusal::BadRequest)?;
    let p = period_for(Some(end), today);
    let rows = top_ten(s, p, true)
        .into_iter()
        .map(|h| {
            let (name, kind) = HOLDERS[h.holder];
            json!({
                "code": s.code, "secucode": s.full_code(), "endDate": p.stamp(),
                "holderRank": h.rank, "holderName": name, "holderType": kind,
                "holdNum": h.shares, "holdRatio": h.ratio, "changeType": h.change,
            })
        })
        .collect();
    Ok(Value::Array(rows))
}

/// Holder positions across the market: every stock's top ten at `endDate`, filtered
/// by holder `code` and `holdNumChange` (a change type: 增加, 减少, 不变, 新进),
/// paged by `page` and `pageSize` (50).
fn holder_list(call: &Call, today: NaiveDate) -> Answer {
    let q = &call.query;
    let p = period_for(q.date("endDate")?, today);
    let float = q.choice("type", &["top10", "top10Float"], "top10")? == "top10Float";
    let paging = q.paging(50)?;
    let holder = q.get("code");
    let change = q.get("holdNumChange");
    let (skip, take) = paging.window();
    let mut total = 0;
    let mut rows = Vec::new();
    for s in &universe().stocks {
        for h in top_ten(s, p, float) {
            if holder.is_some_and(|c| c != holder_code(h.holder))
                || change.is_some_and(|c| c != h.change)
            {
                continue;
            }
            if total >= skip && rows.len() < take {
                rows.push(json!({
                    "code": s.code, "name": s.name, "holderName": HOLDERS[h.holder].0,
                    "holdAmount": h.shares, "holdRatio": h.ratio, "changeType": h.change,
                    "secucode": s.full_code(), "endDate": p.stamp(), "holderRank": h.rank,
                }));
            }
            total += 1;
        }
    }
    Ok(mapped_page(rows, total, paging))
}

/// Earnings forecasts for `reportDate` (the latest period when absent), paged. The
/// upstream's only sample is a failure ("Bad Request Exception" without parameters,
/// although its docs call every parameter optional): the shape is a guess in the
/// style of `/stock/shareholder/list`.
fn forecasts(call: &Call, today: NaiveDate) -> Answer {
    // The docs call every parameter optional, yet their sample of the bare request
    // is "Bad Request Exception": the service needs a report period. Refused the same
    // way here (the guess: `reportDate` is the one it needs).
    let date = call.query.date("reportDate")?.ok_or(Refusal::BadRequest)?;
    let p = period_for(Some(date), today);
    let paging = call.query.paging(20)?;
    let kinds = [
        "预增", "预减", "扭亏", "首亏", "续盈", "续亏", "略增", "略减",
    ];
    let stocks: Vec<&Stock> = universe().stocks.iter().step_by(3).collect();
    let rows = paging
        .slice(&stocks)
        .into_iter()
        .map(|s| {
            let mut r = rng(s.seed ^ p.end.num_days_from_ce() as u64 ^ 0xF0);
            let profit = report(s, p).net_profit;
            let low = 150.0 * r.f64() - 60.0;
            row(
                s,
                json!({
                    "reportDate": p.stamp(),
                    "predictType": kinds[r.usize(..kinds.len())],
                    "predictFinance": "归属于上市公司股东的净利润",
                    "addAmpLower": r2(low),
                    "addAmpUpper": r2(low + 30.0 * r.f64()),
                    "predictAmtLower": int(profit * 0.9),
                    "predictAmtUpper": int(profit * 1.1),
                    "changeReason": "主营业务收入增长，成本费用控制良好。",
                    "noticeDate": stamp(p.end + chrono::Duration::days(r.i64(5..25))),
                }),
            )
        })
        .collect();
    Ok(mapped_page(rows, stocks.len(), paging))
}

/// The upstream's ten-year performance ranking. Its only sample is a failure ("Failed
/// to get performance ten years"); `sortColumn` (default `PARENT_NI_3Q`) names a raw
/// datacenter column, so the guess is a datacenter table `{pages, data, count}` with
/// UPPER_SNAKE rows, sorted descending by that column. `industryName` filters,
/// `year` picks the report year (the last full year when absent, or when it is not
/// a number: the docs type it as a string, which NestJS lets through).
fn ten_years(call: &Call, today: NaiveDate) -> Answer {
    let q = &call.query;
    let last_year = i64::from(latest_period(today).end.year())
        - i64::from(latest_period(today).fraction() < 1.0);
    let year = q
        .int("year", last_year)
        .unwrap_or(last_year)
        .clamp(1900, 2100) as i32;
    let industry = q.get("industryName");
    let sort = q.text("sortColumn", "PARENT_NI_3Q");
    let mut rows: Vec<Value> = universe()
        .stocks
        .iter()
        .filter(|s| industry.is_none_or(|i| INDUSTRIES[s.industry].contains(i)))
        .map(|s| ten_year_row(s, year))
        .collect();
    let key = |v: &Value| v[sort].as_f64().unwrap_or(f64::NEG_INFINITY);
    rows.sort_by(|a, b| key(b).total_cmp(&key(a)));
    let count = rows.len();
    Ok(super::datacenter(rows, count, 1))
}

fn ten_year_row(s: &Stock, year: i32) -> Value {
    let end = |y: i32| Period {
        end: NaiveDate::from_ymd_opt(y, 12, 31).expect("a real date"),
    };
    let (now, three, ten) = (
        report(s, end(year)),
        report(s, end(year - 3)),
        report(s, end(year - 10)),
    );
    let cagr = |a: f64, b: f64, n: f64| {
        (a > 0.0 && b > 0.0).then(|| r2(((a / b).powf(1.0 / n) - 1.0) * 100.0))
    };
    json!({
        "SECUCODE": s.full_code(),
        "SECURITY_CODE": s.code,
        "SECURITY_NAME_ABBR": s.name,
        "INDUSTRY_NAME": INDUSTRIES[s.industry],
        "REPORT_YEAR": year.to_string(),
        "TOTAL_OPERATE_INCOME": int(now.revenue),
        "PARENT_NETPROFIT": int(now.net_profit),
        "TOI_3Q": cagr(now.revenue, three.revenue, 3.0),
        "PARENT_NI_3Q": cagr(now.net_profit, three.net_profit, 3.0),
        "TOI_10Y": cagr(now.revenue, ten.revenue, 10.0),
        "PARENT_NI_10Y": cagr(now.net_profit, ten.net_profit, 10.0),
        "ROE_AVG": r2(now.roe),
    })
}

fn ten_years_latest(s: &Stock, today: NaiveDate) -> Value {
    let mut p = latest_period(today);
    while p.fraction() < 1.0 {
        p = p.previous();
    }
    let value_year = p.end.year() + 1;
    json!([row(
        s,
        json!({
            "industryName": INDUSTRIES[s.industry],
            "maxReportDate": p.stamp(),
            "maxYear": p.end.year(),
            "maxValueDate": format!("{value_year}-06-30 00:00:00"),
            "maxValueYear": value_year,
        })
    )])
}

/// Every board the stock belongs to. The documented sample is a copy of another
/// page's, so this shape is a guess: one mapped row per board, `boardType` one of
/// 行业, 地域, 概念, 风格.
fn boards(s: &Stock) -> Value {
    let concepts = &universe().concepts;
    let board = |kind: BoardKind, i: usize, name: &str, label: &str| {
        row(
            s,
            json!({ "boardCode": board_code(kind, i), "boardName": name, "boardType": label }),
        )
    };
    let mut rows = vec![
        board(
            BoardKind::Industry,
            s.industry,
            INDUSTRIES[s.industry],
            "行业",
        ),
        board(BoardKind::Region, s.region, REGIONS[s.region], "地域"),
    ];
    rows.extend(
        s.concepts
            .iter()
            .map(|&c| board(BoardKind::Concept, c, &concepts[c], "概念")),
    );
    rows.extend(
        s.styles
            .iter()
            .map(|&c| board(BoardKind::Style, c, STYLES[c], "风格")),
    );
    Value::Array(rows)
}

fn day_rng(s: &Stock, salt: &str, today: NaiveDate) -> fastrand::Rng {
    rng(s.seed ^ seed_of(salt) ^ today.num_days_from_ce() as u64)
}

fn score(r: &mut fastrand::Rng) -> f64 {
    ((30.0 + 65.0 * r.f64()) * 1e6).round() / 1e6
}

fn scores(s: &Stock, today: NaiveDate) -> Value {
    let mut r = day_rng(s, "comprehensive", today);
    json!([row(
        s,
        json!({
            "totalScore": score(&mut r), "basicScore": score(&mut r), "marketScore": score(&mut r),
            "technologyScore": score(&mut r), "fundScore": score(&mut r), "newsScore": score(&mut r),
            "diagnoseDate": stamp(market::last_trading_day(today)),
        })
    )])
}

fn message(s: &Stock, today: NaiveDate) -> Value {
    let words = [
        "近期消息面活跃，主力资金有流出迹象，短期呈现震荡趋势，市场关注意愿一般。",
        "近期利好消息较多，主力资金小幅流入，短期趋势向好，市场关注度提升。",
        "近期消息面平淡，资金进出均衡，短期横盘整理，市场关注意愿较低。",
    ];
    let pick = day_rng(s, "message", today).usize(..words.len());
    json!([row(s, json!({ "wordsExplain": words[pick] }))])
}

/// The latest four reports' financial health.
fn evaluation(s: &Stock, today: NaiveDate) -> Value {
    let labels = [
        "财务整体良好",
        "财务状况一般",
        "盈利能力较强",
        "偿债压力较大",
    ];
    let rows: Vec<Value> = periods(today, 4)
        .into_iter()
        .map(|p| {
            let rep = report(s, p);
            let mut r = rng(s.seed ^ p.end.num_days_from_ce() as u64 ^ 0xE7);
            row(s, json!({
                "reportDate": p.stamp(), "reportType": p.long_label(),
                "weightRoe": r2(rep.roe), "weightRoeRank": null,
                "netProfitYoyRatio": 60.0 * r.f64() - 20.0, "totalAssetsTr": 0.01 + 0.5 * r.f64(),
                "saleCashRatio": 60.0 + 60.0 * r.f64(), "debtAssetRatio": rep.debt_ratio,
                "labelExplain": labels[r.usize(..labels.len())],
            }))
        })
        .collect();
    Value::Array(rows)
}

/// The financial portrait. The upstream's only sample is a failure ("Failed to get
/// financial portrait"): this shape is a guess, one mapped row per dimension of the
/// latest report with the stock's score and its industry's average.
fn portrait(s: &Stock, today: NaiveDate) -> Value {
    let p = latest_period(today);
    let mut r = rng(s.seed ^ p.end.num_days_from_ce() as u64 ^ 0x90);
    let rows: Vec<Value> = ["盈利能力", "成长能力", "偿债能力", "营运能力", "现金流"]
        .into_iter()
        .map(|dimension| {
            let score = r2(30.0 + 65.0 * r.f64());
            row(s, json!({
                "reportDate": p.stamp(), "reportType": p.long_label(), "dimension": dimension,
                "score": score, "industryAvg": r2(40.0 + 30.0 * r.f64()),
                "description": format!("{dimension}{}", if score > 60.0 { "优于行业平均" } else { "弱于行业平均" }),
            }))
        })
        .collect();
    Value::Array(rows)
}

/// `{total, list}` of news about `code` (market news without one), paged by
/// `pageIndex` (from 1) and `pageSize` (20). The sample's list is empty, so the item
/// is a guess.
fn stock_news(call: &Call, today: NaiveDate) -> Answer {
    let q = &call.query;
    let (name, seed) = match q.get("code") {
        Some(code) => match stock(code) {
            Ok(s) => (s.name.as_str(), s.seed),
            Err(_) => return Ok(json!({ "total": 0, "list": [] })),
        },
        None => ("A股", 0),
    };
    let page = q.int("pageIndex", 1)?.max(1) as usize;
    let size = q.int("pageSize", 20)?.max(1) as usize;
    let total = 100;
    let what = [
        "发布公告",
        "获北向资金增持",
        "举行业绩说明会",
        "入选指数样本",
        "高管增持",
    ];
    let list: Vec<Value> = ((page - 1) * size..total.min(page * size))
        .map(|i| {
            let day = today - chrono::Duration::days(i as i64);
            json!({
                "id": format!("{}{i:03}", seed % 100_000),
                "title": format!("{name}{}", what[i % what.len()]),
                "summary": format!("{name}{}，详情见公司公告。", what[i % what.len()]),
                "source": "证券时报",
                "publishTime": unix_at(day, 12),
                "url": format!("https://finance.example.cn/a/{}{i:03}.html", seed % 100_000),
            })
        })
        .collect();
    Ok(json!({ "total": total, "list": list }))
}

fn core_themes(s: &Stock) -> Value {
    let concepts = &universe().concepts;
    let rows: Vec<Value> = s
        .concepts
        .iter()
        .enumerate()
        .map(|(rank, &c)| {
            row(
                s,
                json!({
                    "boardCode": board_code(BoardKind::Concept, c),
                    "boardName": concepts[c],
                    "selectedReason": format!("公司业务涉及{}，相关产品已批量供货。", concepts[c]),
                    "boardRank": rank + 1,
                    "boardYield": r2((seed_of(&concepts[c]) % 800) as f64 / 100.0 - 4.0),
                }),
            )
        })
        .collect();
    Value::Array(rows)
}
