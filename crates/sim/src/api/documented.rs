//! The newer documented endpoints, answered in the shape of their documented example
//! (docs/upstream-endpoints.json): the example's keys and types, each array the docs
//! cut with a `"..."` item grown to a realistic count, the stock's own code and name
//! written in, numbers varied per stock and row so that answers differ, and the
//! parameters that change an answer honoured (years, topN, limit, ranges, paging,
//! cursors). The financial statements come out at tens of KB, as upstream.

use chrono::{DateTime, Datelike, Duration as Days, NaiveDate, Utc};
use serde_json::{Map, Value, json};

use super::{stock, unix_at};
use crate::docs;
use crate::market;
use crate::request::{Answer, Call, Refusal};
use crate::universe::{INDUSTRIES, Stock, rng, universe};

/// The endpoints this file answers.
pub(super) fn answer(call: &Call, now: DateTime<Utc>) -> Option<Answer> {
    let t = call.template;
    let today = market::trading_date(now);
    Some(match t {
        "/stock/financial/snapshot/{code}" => with_stock(call, |s| {
            let date = call.query.text("reportDate", "2024-12-31").to_owned();
            let mut data = grown(t, s, 1);
            data["reportDate"] = json!(date);
            data["snapshot"]["reportDate"] = json!(date);
            data["snapshot"]["period"] = json!(&date[..4.min(date.len())]);
            data
        }),
        "/stock/financial/history/{code}"
        | "/stock/financial/statements/{code}"
        | "/stock/financial/ratio/{code}"
        | "/stock/financial/dupont/{code}" => with_stock(call, |s| {
            let years = call.query.int("years", 5).unwrap_or(5).clamp(1, 50) as usize;
            let mut data = grown(t, s, years);
            data["years"] = json!(years);
            if let Some(kind) = call.query.get("reportType") {
                data["reportType"] = json!(kind);
            }
            dated_by_year(&mut data, today);
            data
        }),
        "/stock/corporate-actions" => with_query_stock(call, |s| corporate_actions(call, s, today)),
        "/stock/valuation/historical-pe" => {
            with_query_stock(call, |s| historical_pe(call, s, today))
        }
        "/stock/peers/{code}" => with_stock(call, |s| {
            let n = call.query.int("topN", 10).unwrap_or(10).clamp(1, 20) as usize;
            let mut data = grown(t, s, n);
            data["totalUniverse"] = json!(n.max(9));
            data
        }),
        "/stock/company/operations/{code}" => with_stock(call, |s| {
            let n = call.query.int("topN", 10).unwrap_or(10).clamp(1, 20) as usize;
            grown(t, s, n)
        }),
        "/stock/industry/cycle/{code}" => with_stock(call, |s| grown(t, s, 1)),
        "/stock/governance/events/{code}" => with_stock(call, |s| {
            let n = call.query.int("limit", 10).unwrap_or(10).clamp(1, 30) as usize;
            let mut data = grown(t, s, n.min(3));
            data["total"] = json!(count_of(&data["events"]));
            data
        }),
        "/stock/regulatory/events" => with_query_stock(call, |s| {
            let mut data = grown(t, s, 3);
            data["total"] = json!(count_of(&data["events"]));
            data
        }),
        "/stock/report/search" => with_query_stock(call, |s| {
            let n = call.query.int("limit", 10).unwrap_or(10).clamp(1, 100) as usize;
            let mut data = grown(t, s, n.min(12));
            let category = call.query.text("category", "年报").to_owned();
            data["category"] = json!(category);
            data["requestedCategories"] = json!(category);
            data["timeRange"] = json!(call.query.text("timeRange", "3y"));
            data["total"] = json!(count_of(&data["candidates"]));
            data
        }),
        "/stock/topic/operations-insight/{code}" => with_stock(call, |s| grown(t, s, 4)),
        "/stock/screener/universe" => screener(call),
        "/news/topic-subject" => topic_subject(call, today),
        _ => return None,
    })
}

/// The answer for the stock of the path's `{code}` (404 for one the universe lacks).
fn with_stock(call: &Call, build: impl FnOnce(&Stock) -> Value) -> Answer {
    stock(call.id()).map(build)
}

/// The same for the query's `code`.
fn with_query_stock(call: &Call, build: impl FnOnce(&Stock) -> Value) -> Answer {
    let code = call.query.required("code")?;
    stock(code).map(build)
}

fn count_of(v: &Value) -> usize {
    v.as_array().map_or(0, Vec::len)
}

/// The documented example of `template`, grown for `s`: each array cut with `"..."`
/// gets `n` rows.
fn grown(template: &str, s: &Stock, n: usize) -> Value {
    let example = docs::position(template)
        .and_then(|i| docs::routes()[i].example.clone())
        .unwrap_or(Value::Null);
    let mut out = example;
    grow(&mut out, s, n, 0);
    out
}

/// Writes `s` into `v` and grows its arrays (see [`grown`]); `row` varies the numbers.
fn grow(v: &mut Value, s: &Stock, n: usize, row: usize) {
    match v {
        Value::Array(items) => {
            let cut = items.iter().any(|i| i.as_str() == Some("..."));
            items.retain(|i| i.as_str() != Some("..."));
            if cut && let Some(first) = items.first().cloned() {
                while items.len() < n {
                    items.push(first.clone());
                }
                items.truncate(n.max(1));
            }
            for (i, item) in items.iter_mut().enumerate() {
                grow(item, s, n, row * 31 + i);
            }
        }
        Value::Object(map) => {
            for (key, value) in map.iter_mut() {
                match (key.as_str(), &value) {
                    ("code" | "SECURITY_CODE" | "stockCode", Value::String(_)) => {
                        *value = json!(s.code)
                    }
                    ("secuCode" | "secucode" | "SECUCODE", Value::String(_)) => {
                        *value = json!(s.full_code())
                    }
                    (
                        "name" | "stockName" | "securityNameAbbr" | "SECURITY_NAME_ABBR",
                        Value::String(_),
                    ) if row == 0 => *value = json!(s.name),
                    ("industryName", Value::String(_)) => *value = json!(INDUSTRIES[s.industry]),
                    (_, Value::Number(x)) => {
                        if let Some(f) = x.as_f64() {
                            *value = varied(f, s.seed, row, key);
                        }
                    }
                    _ => grow(value, s, n, row),
                }
            }
        }
        _ => {}
    }
}

/// Every number in `v` moved by a few percent for `seed` (a listing without a `Stock`).
fn vary(v: &mut Value, seed: u64) {
    match v {
        Value::Array(items) => items.iter_mut().for_each(|item| vary(item, seed)),
        Value::Object(map) => {
            for (key, value) in map.iter_mut() {
                match value.as_f64() {
                    Some(f) if value.is_number() => *value = varied(f, seed, 0, key),
                    _ => vary(value, seed),
                }
            }
        }
        _ => {}
    }
}

/// `f` moved by a few percent per stock, row and key; integers stay integers and
/// small counts and flags keep their value.
fn varied(f: f64, seed: u64, row: usize, key: &str) -> Value {
    if f.abs() < 30.0 && f.fract() == 0.0 {
        return json!(f as i64);
    }
    let salt = key.bytes().fold(seed ^ row as u64, |h, b| {
        h.wrapping_mul(0x100_0000_01B3).wrapping_add(u64::from(b))
    });
    let factor = 0.85 + rng(salt).f64() * 0.3;
    if f.fract() == 0.0 && f.abs() < 9.0e15 {
        json!((f * factor).round() as i64)
    } else {
        json!(((f * factor) * 10_000.0).round() / 10_000.0)
    }
}

/// Rows of a financial series report consecutive years back from the last closed
/// one: their `reportDate` (and its long forms) follow the row.
fn dated_by_year(data: &mut Value, today: NaiveDate) {
    let last = if today.month() > 4 {
        today.year() - 1
    } else {
        today.year() - 2
    };
    let Value::Object(map) = data else { return };
    for (_, v) in map.iter_mut() {
        if let Value::Array(rows) = v {
            for (i, row) in rows.iter_mut().enumerate() {
                let year = last - i as i32;
                set_year(row, year);
            }
        }
    }
}

fn set_year(v: &mut Value, year: i32) {
    if let Value::Object(map) = v {
        for (key, value) in map.iter_mut() {
            match (key.as_str(), value.as_str()) {
                ("reportDate" | "REPORT_DATE", Some(old)) if old.len() >= 10 => {
                    *value = json!(format!("{year}{}", &old[4..]))
                }
                ("period", Some(_)) => *value = json!(year.to_string()),
                _ => set_year(value, year),
            }
        }
    }
}

/// Dividends, one a year from the listing, their ex-dates filtered by `from`/`to`.
fn corporate_actions(call: &Call, s: &Stock, today: NaiveDate) -> Value {
    let from = call
        .query
        .date("from")
        .ok()
        .flatten()
        .unwrap_or(NaiveDate::MIN);
    let to = call.query.date("to").ok().flatten().unwrap_or(today);
    let mut rows = Vec::new();
    for year in s.listed.year() + 1..=today.year() {
        let Some(ex) =
            NaiveDate::from_ymd_opt(year, 6 + (s.seed % 4) as u32, 10 + (s.seed % 15) as u32)
        else {
            continue;
        };
        if ex < from || ex > to || ex > today {
            continue;
        }
        let record = ex - Days::days(1);
        let cash = (rng(s.seed ^ year as u64).f64() * 2.0 * 1000.0).round() / 1000.0;
        rows.push(json!({
            "code": s.code,
            "actionType": "dividend",
            "exDate": ex.to_string(),
            "recordDate": record.to_string(),
            "cashDividendPerShare": cash,
        }));
    }
    Value::Array(rows)
}

/// A weekly PE-TTM series over `interval` months, with its percentile statistics.
fn historical_pe(call: &Call, s: &Stock, today: NaiveDate) -> Value {
    let months = call.query.int("interval", 60).unwrap_or(60).clamp(1, 600);
    let weeks = (months * 13 / 3).max(1) as usize;
    let mut dates = Vec::with_capacity(weeks);
    let mut pes = Vec::with_capacity(weeks);
    let mut prices = Vec::with_capacity(weeks);
    let mut r = rng(s.seed ^ 0x9e);
    let mut pe = 8.0 + r.f64() * 40.0;
    for w in (0..weeks).rev() {
        let day = today - Days::weeks(w as i64);
        pe = (pe * (0.96 + r.f64() * 0.08)).max(1.0);
        dates.push(json!(day.to_string()));
        pes.push(json!((pe * 100.0).round() / 100.0));
        prices.push(json!((pe * 0.8 * 100.0).round() / 100.0));
    }
    let mut sorted: Vec<f64> = pes.iter().filter_map(Value::as_f64).collect();
    sorted.sort_by(f64::total_cmp);
    let at = |q: f64| sorted[((sorted.len() - 1) as f64 * q).round() as usize];
    let current = pe;
    let percentile =
        sorted.iter().filter(|x| **x <= current).count() as f64 * 100.0 / sorted.len() as f64;
    let mean = sorted.iter().sum::<f64>() / sorted.len() as f64;
    let stats = json!({
        "currentPe": (current * 100.0).round() / 100.0, "percentile": percentile, "mean": mean,
        "median": at(0.5), "p25": at(0.25), "p50": at(0.5), "p75": at(0.75),
        "min": at(0.0), "minDate": dates[0], "max": at(1.0), "maxDate": dates[dates.len() - 1],
    });
    let mut out = Map::new();
    out.insert("code".into(), json!(s.code));
    out.insert("interval".into(), json!(months.to_string()));
    out.insert("dates".into(), Value::Array(dates));
    out.insert("peTtm".into(), Value::Array(pes));
    out.insert("prices".into(), Value::Array(prices));
    if let Value::Object(flat) = stats.clone() {
        out.extend(flat);
    }
    out.insert("stats".into(), stats);
    Value::Object(out)
}

/// The screener's universe, paged (`page` from 1, `pageSize` up to 500), with the
/// whole `total` so a client pages until it has every row.
fn screener(call: &Call) -> Answer {
    let market = call.query.text("market", "CN_A").to_owned();
    let page = call.query.int("page", 1)?.max(1) as usize;
    let size = call.query.int("pageSize", 100)?.clamp(1, 500) as usize;
    let example = grown(call.template, &universe().stocks[0], 1);
    let template_row = example["items"].get(0).cloned().unwrap_or(Value::Null);
    let stocks = &universe().stocks;
    let hk = &universe().hk;
    let (total, items): (usize, Vec<Value>) = if market == "HK" {
        let rows = hk.iter().skip((page - 1) * size).take(size).map(|h| {
            let mut row = template_row.clone();
            vary(&mut row, h.seed);
            row["code"] = json!(h.code);
            row["secucode"] = json!(h.full_code());
            row["name"] = json!(h.name);
            row["market"] = json!(market);
            row["industry"] = json!(INDUSTRIES[h.industry]);
            row["listDate"] = json!(h.listed.format("%Y%m%d").to_string());
            row
        });
        (hk.len(), rows.collect())
    } else {
        let rows = stocks.iter().skip((page - 1) * size).take(size).map(|s| {
            let mut row = template_row.clone();
            grow(&mut row, s, 1, 0);
            row["market"] = json!(market);
            row["industry"] = json!(INDUSTRIES[s.industry]);
            row["listDate"] = json!(s.listed.format("%Y%m%d").to_string());
            row
        });
        (stocks.len(), rows.collect())
    };
    let mut data = example;
    data["market"] = json!(market);
    data["total"] = json!(total);
    data["page"] = json!(page);
    data["pageSize"] = json!(size);
    data["items"] = Value::Array(items);
    Ok(data)
}

/// A subject's news, newest first, `pageSize` a page, older than `lastTime` (Unix
/// seconds) when given.
fn topic_subject(call: &Call, today: NaiveDate) -> Answer {
    let key = call.query.text("subjectKey", "morning_brief").to_owned();
    let size = call.query.int("pageSize", 20)?.clamp(1, 100) as usize;
    let before = call
        .query
        .get("lastTime")
        .map(str::parse::<i64>)
        .transpose()
        .map_err(|_| Refusal::BadRequest)?;
    let mut data = grown(call.template, &universe().stocks[0], 1);
    let template_item = data["data"].get(0).cloned().unwrap_or(Value::Null);
    let mut items = Vec::new();
    let mut day = today;
    while items.len() < size && day > today - Days::days(400) {
        let at = unix_at(day, 8);
        if before.is_none_or(|b| at < b) {
            let mut item = template_item.clone();
            let seed = key
                .bytes()
                .fold(at as u64, |h, b| h.rotate_left(5) ^ u64::from(b));
            item["id"] = json!(1_000_000 + (seed % 1_000_000));
            item["publishTime"] = json!(at);
            let s = &universe().stocks[(seed % universe().stocks.len() as u64) as usize];
            if let Some(stocks) = item["stocks"].as_array_mut() {
                for stock in stocks.iter_mut() {
                    stock["code"] = json!(format!(
                        "{}{}",
                        s.exchange.suffix().to_ascii_lowercase(),
                        s.code
                    ));
                    stock["name"] = json!(s.name);
                }
            }
            items.push(item);
        }
        day -= Days::days(1);
    }
    data["subjectKey"] = json!(key);
    data["total"] = json!(items.len());
    data["data"] = Value::Array(items);
    Ok(data)
}

/// What `POST /stock/report/download` answers: the record of a download into the
/// server's directory. The docs show no example; this shape is a guess.
pub(crate) fn download_record(body: Option<&Value>, now: DateTime<Utc>) -> Answer {
    let body = body.ok_or(Refusal::BadRequest)?;
    let url = body["url"]
        .as_str()
        .filter(|u| !u.is_empty())
        .ok_or(Refusal::BadRequest)?;
    let file = url.rsplit('/').next().unwrap_or("report.pdf");
    let dir = body["saveDir"].as_str().unwrap_or("downloads");
    Ok(json!({
        "url": url,
        "stockCode": body["stockCode"],
        "category": body["category"],
        "year": body["year"],
        "path": format!("{dir}/{file}"),
        "bytes": 1_048_576 + (url.len() as u64 * 7919) % 4_194_304,
        "downloadedAt": now.to_rfc3339(),
    }))
}
