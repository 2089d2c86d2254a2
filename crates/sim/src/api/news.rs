//! News payloads in the upstream's mixed style (camelCase outside, snake_case inside
//! items, Unix-second times, numbers preformatted as strings): overview, mainline,
//! theme library, headlines and their search, and the cursor-paged flash feed.

use chrono::{DateTime, Datelike, Duration as Days, NaiveDate, Utc};
use chrono_tz::Asia::Shanghai;
use serde_json::{Value, json};

use super::figures::figures;
use super::{prefixed, r2, unix_at, unrouted};
use crate::market;
use crate::request::{Answer, Call, Refusal};
use crate::universe::{Stock, rng, seed_of, universe};

pub(super) fn answer(call: &Call, now: DateTime<Utc>) -> Answer {
    let today = market::trading_date(now);
    match call.template {
        "/news/overview" => Ok(overview(now)),
        "/news/mainline" => Ok(mainline(today)),
        "/news/topic/library/list" => Ok(topic_list()),
        "/news/topic/library/detail/{themeId}" => theme(call.id()).map(|i| topic_detail(i, today)),
        "/news/topic/library/stocks/{themeId}" => theme(call.id()).map(topic_stocks),
        "/news/headlines" => {
            let keyword = call.query.text("keyword", DEFAULT_KEYWORD);
            news_page(call, keyword, 10, now)
        }
        "/news/search" => news_page(call, call.query.text("keyword", DEFAULT_KEYWORD), 20, now),
        "/news/feed" => Ok(feed(call.query.get("cursor"), now)),
        _ => unrouted(call),
    }
}

/// The keyword `/news/headlines` uses when none is given.
const DEFAULT_KEYWORD: &str = "新闻联播要闻";

/// Amounts of 100 million yuan as the upstream writes them: `2.64万亿`, `-1626亿`.
fn yi(v: f64) -> String {
    if v.abs() >= 10_000.0 {
        format!("{:.2}万亿", v / 10_000.0)
    } else {
        format!("{v:.0}亿")
    }
}

/// The market's breadth at `now`, counted over every simulated quote.
fn overview(now: DateTime<Utc>) -> Value {
    let today = market::trading_date(now);
    let stocks = &universe().stocks;
    let changes: Vec<(f64, f64)> = stocks
        .iter()
        .map(|s| {
            (
                figures(s, now).change_rate as f64 / 100.0,
                s.limit() * 100.0,
            )
        })
        .collect();
    let count = |f: &dyn Fn(f64, f64) -> bool| changes.iter().filter(|(c, l)| f(*c, *l)).count();
    let limit_up = count(&|c, l| c >= l - 0.05);
    let limit_down = count(&|c, l| c <= -l + 0.05);
    // Flat quotes count in no bucket.
    let bucket = |lo: f64, hi: f64| count(&|c, _| c != 0.0 && c > lo && c <= hi);
    let mut r = rng(seed_of("overview") ^ today.num_days_from_ce() as u64);
    let balance = 18_000.0 + 12_000.0 * r.f64();
    let change = 3_000.0 * r.f64() - 1_500.0;
    let rise = count(&|c, _| c > 0.0);
    let board_rates: Vec<String> = (0..4).map(|_| format!("{}%", r.u32(10..60))).collect();
    json!({
        "marketDegree": r.u32(10..90).to_string(),
        "shszBalance": yi(balance),
        "shszBalanceChangePx": yi(change),
        "previewBalance": yi(balance * 1.02),
        "previewBalanceChangePx": yi(change * 1.1),
        "upRatio": format!("{:.2}%", 100.0 * limit_up as f64 / (limit_up + limit_down).max(1) as f64),
        "upRatioNum": limit_up.to_string(),
        "upOpenNum": r.u32(5..40).to_string(),
        "performance": format!("{:.2}%", 4.0 * r.f64() - 2.0),
        "upOpenRatio": format!("{}%", r.u32(20..80)),
        "profitRatio": format!("{}%", 100 * rise / stocks.len()),
        "upDownDis": {
            "status": true,
            "suspend_num": 0,
            "up_num": limit_up,
            "down_num": limit_down,
            "rise_num": rise,
            "fall_num": count(&|c, _| c < 0.0),
            "flat_num": count(&|c, _| c == 0.0),
            "down_10": bucket(-100.0, -8.0), "down_8": bucket(-8.0, -6.0), "down_6": bucket(-6.0, -4.0),
            "down_4": bucket(-4.0, -2.0), "down_2": bucket(-2.0, 0.0),
            "up_2": bucket(0.0, 2.0), "up_4": bucket(2.0, 4.0), "up_6": bucket(4.0, 6.0),
            "up_8": bucket(6.0, 8.0), "up_10": bucket(8.0, 100.0),
        },
        "limitUpBoard": {
            "row1": ["一板", "二板", "三板", "高度板"],
            "row2": (0..4).map(|i| (limit_up >> i).to_string()).collect::<Vec<_>>(),
            "row3": ["连板率", &board_rates[0], &board_rates[1], &board_rates[2]],
        },
    })
}

/// A news-style stock pick: `sh600519` and name.
fn pick(r: &mut fastrand::Rng) -> &'static Stock {
    let stocks = &universe().stocks;
    &stocks[r.usize(..stocks.len())]
}

fn faucet(r: &mut fastrand::Rng) -> Value {
    let s = pick(r);
    json!({
        "reason": format!("{}天涨超{}%", r.u32(5..30), 10 * r.u32(3..13)),
        "rise_range": r2(20.0 * r.f64() - 8.0),
        "status": "L",
        "stock_code": prefixed(&s.code, s.exchange),
        "stock_name": s.name,
    })
}

fn mainline(today: NaiveDate) -> Value {
    let mut r = rng(seed_of("mainline") ^ today.num_days_from_ce() as u64);
    let concepts = &universe().concepts;
    let chances: Vec<Value> = (0..5)
        .map(|i| {
            let title = &concepts[r.usize(..concepts.len())];
            let plates: Vec<Value> = (0..r.usize(1..4))
                .map(|_| {
                    let name = &concepts[r.usize(..concepts.len())];
                    json!({
                        "article": {
                            "id": 2_300_000 + r.u32(..100_000),
                            "img": "https://image..cn/images/plate.jpg",
                            "read_count": r.u32(10_000..2_000_000).to_string(),
                            "time": unix_at(today, 8),
                            "title": format!("{name}方向持续活跃，关注产业链轮动机会"),
                        },
                        "code": format!("cls{}", 80_000 + seed_of(name) % 2_000),
                        "faucet_1": faucet(&mut r), "faucet_2": faucet(&mut r), "faucet_3": faucet(&mut r),
                        "name": name,
                        "reason": format!("{name}迎来政策与业绩双重催化。"),
                        "rise_count": r.u32(0..5),
                        "rise_range": ((r.f64() * 0.08 - 0.03) * 1e4).round() / 1e4,
                        "time": unix_at(today, 9),
                        "vip": null,
                    })
                })
                .collect();
            json!({ "continued": r.u32(1..8), "hot": r.u32(1..6), "id": i + 1, "mainLine_desc": format!("{title}景气度提升，资金持续流入。"), "plates": plates, "title": title })
        })
        .collect();
    let winds: Vec<Value> = (0..6)
        .map(|i| {
            let title = &concepts[r.usize(..concepts.len())];
            let stocks: Vec<Value> = (0..3)
                .map(|_| {
                    let s = pick(&mut r);
                    json!({ "last_px": 0, "pre30_close": 0, "rise_range": r2(20.0 * r.f64() - 5.0), "status": "L", "stock_code": prefixed(&s.code, s.exchange), "stock_name": s.name })
                })
                .collect();
            json!({ "faucet_stocks": stocks, "hot": r.u32(1..6), "id": 10 + i, "img": "https://img..cn/images/wind.jpg", "interpret": format!("{title}相关产品价格上涨，龙头公司业绩超预期。"), "plate_change": ((r.f64() * 0.1 - 0.03) * 1e4).round() / 1e4, "plate_code": format!("cls{}", 81_000 + seed_of(title) % 1_000), "subject_id": 2_000 + i, "title": title })
        })
        .collect();
    json!({
        "chanceDesc": "判断主线机会，洞悉趋势强度",
        "chances": chances,
        "mainLineDesc": "精准把控主力动向，掌握主线机会",
        "styleDesc": "预判风格走向，投资无往不利",
        "styles": {
            "id": 2_330_000 + today.ordinal(),
            "index_1": style_index(&mut r, "sz399006", "创业板指"),
            "index_2": style_index(&mut r, "sh000001", "上证指数"),
            "interpret": "市场交投趋于谨慎，关注业绩主线。",
            "title": "风格轮动，关注业绩主线",
        },
        "windDesc": "紧跟每日风口，领悟市场风向",
        "winds": winds,
    })
}

fn style_index(r: &mut fastrand::Rng, code: &str, name: &str) -> Value {
    let stacks: Vec<Value> = (0..5)
        .map(|_| {
            let s = pick(r);
            let pre30 = 5.0 + 200.0 * r.f64();
            let rise = 80.0 * r.f64() - 10.0;
            json!({
                "change_px": r2(20.0 * r.f64() - 10.0),
                "last_px": format!("{:.2}", pre30 * (1.0 + rise / 100.0)),
                "pre30_close": format!("{pre30:.2}"),
                "rise_range": format!("{rise:+.2}%"),
                "stock_code": prefixed(&s.code, s.exchange),
                "stock_name": s.name,
                "trade_status": "ENDTR",
            })
        })
        .collect();
    json!({ "change30": format!("{:+.2}%", 30.0 * r.f64() - 10.0), "code": code, "name": name, "stacks": stacks })
}

/// Themes in the library: the first concepts, with ids from [`FIRST_THEME`].
const THEMES: usize = 120;
/// The id of the first theme.
const FIRST_THEME: usize = 1_000;

/// A theme id (`1001`; the older `T1001` form is read too) as a concept position.
fn theme(id: &str) -> Result<usize, Refusal> {
    id.trim_start_matches(['T', 't'])
        .parse::<usize>()
        .ok()
        .and_then(|n| n.checked_sub(FIRST_THEME))
        .filter(|&i| i < THEMES)
        .ok_or_else(|| Refusal::NotFound(format!("Theme {id} not found")))
}

fn limit_up_count(i: usize) -> u64 {
    seed_of(&universe().concepts[i]) % 6
}

fn topic_list() -> Value {
    let items: Vec<Value> = (0..THEMES)
        .map(|i| {
            let name = &universe().concepts[i];
            json!({ "id": FIRST_THEME + i, "name": name, "summary": format!("{name}作为新一轮产业升级方向，受益于政策支持与需求增长。"), "tag": "", "limitUpNum": limit_up_count(i) })
        })
        .collect();
    json!({ "total": items.len(), "items": items })
}

/// One theme. The upstream's only sample is a failure ("Failed to get topic library
/// detail"): this shape is a guess extending the list item.
fn topic_detail(i: usize, today: NaiveDate) -> Value {
    let name = &universe().concepts[i];
    json!({
        "id": FIRST_THEME + i,
        "name": name,
        "summary": format!("{name}作为新一轮产业升级方向，受益于政策支持与需求增长。"),
        "tag": "",
        "limitUpNum": limit_up_count(i),
        "content": format!("{name}：产业链上游材料、中游制造、下游应用全面受益。\n龙头公司订单饱满，行业景气度持续提升。"),
        "stockCount": topic_members(i).count(),
        "updateTime": unix_at(today, 8),
    })
}

fn topic_members(i: usize) -> impl Iterator<Item = &'static Stock> {
    universe()
        .stocks
        .iter()
        .filter(move |s| s.concepts.contains(&i))
        .take(60)
}

/// The theme's stocks: a bare array. The sample is `[]` (element shape undocumented),
/// so the row is a guess in the mapped style.
fn topic_stocks(i: usize) -> Value {
    let name = &universe().concepts[i];
    let rows: Vec<Value> = topic_members(i)
        .map(|s| super::row(s, json!({ "reason": format!("公司业务涉及{name}") })))
        .collect();
    Value::Array(rows)
}

/// The first day news items exist for.
const NEWS_SINCE: (i32, u32, u32) = (2017, 1, 1);

/// `{total, data}` of daily summaries for `keyword`, newest first; `page` counts from
/// 0 (the upstream's docs say so), `pageSize` defaults to `default_size`.
fn news_page(call: &Call, keyword: &str, default_size: i64, now: DateTime<Utc>) -> Answer {
    let page = call.query.int("page", 0)?.max(0) as usize;
    let size = call.query.int("pageSize", default_size)?.max(1) as usize;
    let local = now.with_timezone(&Shanghai);
    // Today's summary exists from 19:30 on.
    let newest = local.date_naive()
        - Days::days(i64::from(
            local.time() < chrono::NaiveTime::from_hms_opt(19, 30, 0).expect("a real time"),
        ));
    let since =
        NaiveDate::from_ymd_opt(NEWS_SINCE.0, NEWS_SINCE.1, NEWS_SINCE.2).expect("a real date");
    let total = (newest - since).num_days().max(-1) as usize + 1;
    let items: Vec<Value> = (page * size..total.min((page + 1) * size))
        .map(|i| summary(keyword, newest - Days::days(i as i64)))
        .collect();
    Ok(json!({ "total": total, "data": items }))
}

fn summary(keyword: &str, day: NaiveDate) -> Value {
    let mut r = rng(seed_of(keyword) ^ day.num_days_from_ce() as u64);
    let topics = [
        "推动高质量发展",
        "部署重点工作",
        "扩大内需",
        "科技创新",
        "稳就业稳物价",
        "深化改革开放",
    ];
    let n = r.usize(8..25);
    let lines: Vec<String> = (1..=n)
        .map(|k| format!("{k}、{}", topics[r.usize(..topics.len())]))
        .collect();
    json!({
        "id": 2_000_000 + day.num_days_from_ce() as i64 * 7 + (seed_of(keyword) % 7) as i64,
        "content": format!("【{}月{}日{keyword}{n}条】\n{}", day.month(), day.day(), lines.join("；\n")),
        "publishTime": unix_at(day, 19) + 1_800,
    })
}

/// Seconds between two flash-news items.
const FEED_EVERY_SECS: i64 = 90;
/// Items per feed page.
const FEED_PAGE: i64 = 20;

/// `{items, nextCursor, pollingCursor}`: the latest [`FEED_PAGE`] items older than
/// `cursor` (Unix seconds; the newest when absent). `nextCursor` is the last item's
/// time, `pollingCursor` the newest item's id, both as strings.
fn feed(cursor: Option<&str>, now: DateTime<Utc>) -> Value {
    let newest = now.timestamp() / FEED_EVERY_SECS;
    // Any cursor a client sends (negative, huge, far in the past) pages within the
    // feed's first and newest items, with no arithmetic overflow.
    let start = cursor
        .and_then(|c| c.parse::<i64>().ok())
        .map_or(newest, |c| {
            (c.saturating_sub(1).div_euclid(FEED_EVERY_SECS)).min(newest)
        })
        .max(FEED_PAGE - 1);
    let items: Vec<Value> = (0..FEED_PAGE).map(|k| feed_item(start - k)).collect();
    json!({
        "items": items,
        "nextCursor": ((start - FEED_PAGE + 1) * FEED_EVERY_SECS).to_string(),
        "pollingCursor": newest.to_string(),
    })
}

fn feed_item(n: i64) -> Value {
    let stocks = &universe().stocks;
    let s = &stocks[(n.unsigned_abs() as usize * 7) % stocks.len()];
    let what = [
        "发布业绩快报",
        "获机构调研",
        "签订重大合同",
        "股东增持",
        "回购进展公告",
    ][n.rem_euclid(5) as usize];
    let title = format!("{}：{what}", s.name);
    json!({
        "id": n,
        "title": title,
        "content": format!("{title}。公司公告称，相关事项进展顺利。"),
        "contentHtml": format!("<p>{title}。公司公告称，相关事项进展顺利。</p>"),
        "image": "",
        "displayTime": n * FEED_EVERY_SECS,
        "author": { "id": 6029, "name": "快讯编辑", "avatar": "https://wpimg-wscn.awtmt.com/avatar.png", "uri": "https://wallstreetcn.com/authors/6029" },
        "channels": ["global-channel", "a-stock-channel"],
        "globalChannelName": "7x24快讯",
        "score": 1 + n.rem_euclid(3),
        "type": "live",
        "commentCount": n.rem_euclid(4),
        "isCalendar": false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn the_feed_cursor_moves_to_older_items() {
        let now = at("2026-03-07T04:00:00Z");
        let head = feed(None, now);
        let next = head["nextCursor"].as_str().unwrap();
        let older = feed(Some(next), now);
        let last_id = head["items"][19]["id"].as_i64().unwrap();
        assert_eq!(older["items"][0]["id"].as_i64().unwrap(), last_id - 1);
        assert_eq!(head["pollingCursor"], head["items"][0]["id"].to_string());
    }

    #[test]
    fn headlines_page_from_zero() {
        let call = |q: &str| Call::of("/news/headlines", q);
        let now = at("2026-03-07T04:00:00Z");
        let first = news_page(&call("page=0&pageSize=2"), DEFAULT_KEYWORD, 10, now).unwrap();
        let second = news_page(&call("page=1&pageSize=2"), DEFAULT_KEYWORD, 10, now).unwrap();
        assert_eq!(first["data"].as_array().unwrap().len(), 2);
        assert_ne!(first["data"][0]["id"], second["data"][0]["id"]);
        assert!(
            first["data"][0]["content"]
                .as_str()
                .unwrap()
                .contains(DEFAULT_KEYWORD)
        );
        assert!(first["total"].as_u64().unwrap() > 3_000);
        assert_eq!(theme("T1001"), Ok(1));
        assert_eq!(theme("1001"), Ok(1));
        assert!(theme("99").is_err());
    }
}
