//! The simulated answers: per route, the `data` payload in the real upstream's
//! documented shape (docs/UPSTREAM-SHAPES.md §5), deterministic and of realistic size. This
//! file dispatches by group and holds what the groups share; the children build.

mod company;
mod documented;
mod economy;
mod figures;
mod fund;
mod kline;
mod market;
mod news;
mod screen;
mod stock;

use chrono::{DateTime, NaiveDate, Utc};
use chrono_tz::Asia::Shanghai;
use serde_json::{Map, Value, json};

use super::request::{Answer, Call, Paging, Refusal, code_digits};
use super::universe::{Etf, Exchange, Stock, universe};

pub(crate) use documented::download_record;
pub(crate) use stock::quote_row;

/// Builds the `data` payload of a routed request at `now`.
pub(crate) fn answer(call: &Call, now: DateTime<Utc>) -> Answer {
    let t = call.template;
    if let Some(answer) = documented::answer(call, now) {
        answer
    } else if t.starts_with("/news/") {
        news::answer(call, now)
    } else if t.starts_with("/macro/") {
        economy::answer(call, now)
    } else if t.starts_with("/fund/") {
        fund::answer(call, now)
    } else if t.starts_with("/market/") {
        market::answer(call, now)
    } else if let Some(answer) = stock::answer(call, now) {
        answer
    } else {
        company::answer(call, now)
    }
}

/// The answer for a template a group does not serve (a routing bug, never a client's).
fn unrouted(call: &Call) -> Answer {
    Err(Refusal::NotFound(format!("Cannot GET {}", call.template)))
}

/// A stock by code (with or without suffix); 404 for one the universe lacks.
fn stock(code: &str) -> Result<&'static Stock, Refusal> {
    code_digits(code)
        .and_then(|digits| universe().stock(digits))
        .ok_or_else(|| Refusal::NotFound(format!("Stock {code} not found")))
}

/// An ETF by code (with or without suffix); 404 for one the universe lacks.
fn etf(code: &str) -> Result<&'static Etf, Refusal> {
    code_digits(code)
        .and_then(|digits| universe().etf(digits))
        .ok_or_else(|| Refusal::NotFound(format!("Fund {code} not found")))
}

/// Rounds to two decimals.
fn r2(v: f64) -> f64 {
    (v * 100.0).round() / 100.0
}

/// Eastmoney's scaled integer: the value times 10^`decimals`.
fn scaled(v: f64, decimals: u32) -> i64 {
    (v * 10f64.powi(decimals as i32)).round() as i64
}

/// A whole number (yuan, shares) as a JSON integer, as the upstream sends them.
fn int(v: f64) -> i64 {
    v.round() as i64
}

/// The `code` / `secucode` / `name` head of the mapped stock rows.
fn head(s: &Stock) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("code".into(), s.code.clone().into());
    m.insert("secucode".into(), s.full_code().into());
    m.insert("name".into(), s.name.clone().into());
    m
}

/// [`head`] followed by `fields` (an object), as one row.
fn row(s: &Stock, fields: Value) -> Value {
    let mut m = head(s);
    if let Value::Object(rest) = fields {
        m.extend(rest);
    }
    Value::Object(m)
}

/// `sh600519`: the prefixed form news items use.
fn prefixed(code: &str, exchange: Exchange) -> String {
    format!("{}{code}", exchange.suffix().to_ascii_lowercase())
}

/// Unix seconds of `day` at `hour` o'clock, China time.
fn unix_at(day: NaiveDate, hour: u32) -> i64 {
    day.and_hms_opt(hour, 0, 0)
        .and_then(|t| t.and_local_timezone(Shanghai).single())
        .map_or(0, |t| t.timestamp())
}

/// The four kinds of Eastmoney board.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BoardKind {
    Region,
    Industry,
    Concept,
    Style,
}

/// A board's Eastmoney code (`BK0475`): one range of numbers per kind, the position
/// in its list added.
fn board_code(kind: BoardKind, i: usize) -> String {
    let first = match kind {
        BoardKind::Region => 100,
        BoardKind::Industry => 400,
        BoardKind::Concept => 500,
        BoardKind::Style => 1_100,
    };
    format!("BK{:04}", first + i)
}

/// A datacenter page: `{pages, data, count}` (the page and size are not echoed).
fn datacenter(rows: Vec<Value>, count: usize, pages: usize) -> Value {
    json!({ "pages": pages, "data": rows, "count": count })
}

/// A mapped page: `{total, page, pageSize, data}`.
fn mapped_page(rows: Vec<Value>, total: usize, page: Paging) -> Value {
    json!({ "total": total, "page": page.page, "pageSize": page.size, "data": rows })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::route as route_of;

    fn now() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-03-02T02:00:00Z")
            .unwrap()
            .with_timezone(&Utc)
    }

    /// Every documented GET endpoint answers its documented sample request (the
    /// stream's data comes from `stream`), but the one whose documented answer is the
    /// refusal; the retired ones are not served at all.
    #[test]
    fn every_route_answers() {
        for route in crate::docs::routes() {
            if route.method != "GET" || route.template.ends_with("/sse") || route.retired {
                continue;
            }
            if route.template == "/stock/earnings-forecast" {
                let call = route_of(route.template, None).unwrap();
                assert_eq!(answer(&call, now()), Err(Refusal::BadRequest));
                continue;
            }
            let target = route
                .sample
                .clone()
                .unwrap_or_else(|| route.template.to_owned());
            let (path, query) = match target.split_once('?') {
                Some((p, q)) => (p.to_owned(), Some(q.to_owned())),
                None => (target.clone(), None),
            };
            let call = route_of(&path, query.as_deref()).unwrap();
            match answer(&call, now()) {
                Ok(v) => assert!(!v.is_null(), "{target}"),
                Err(e) => panic!("{target}: {e:?}"),
            }
        }
    }

    #[test]
    fn unknown_codes_are_not_found() {
        assert!(matches!(stock("605999"), Err(Refusal::NotFound(_))));
        assert!(matches!(stock("abc"), Err(Refusal::NotFound(_))));
        assert_eq!(stock("600519.sh").unwrap().code, "600519");
        assert!(etf("159915.SZ").is_ok());
    }
}
