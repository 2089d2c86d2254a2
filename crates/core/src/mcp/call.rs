//! One tool call or resource read answered by the read-through, as the REST
//! request it stands for: the arguments made a target, the contract's validation
//! keying it, the cache's answer (fresh, stale or filled once for every caller)
//! turned into the data, when the upstream gave it and how the cache served it;
//! failures as results an agent can act on.

use chrono::SecondsFormat;
use std::sync::Arc;

use rmcp::model::CallToolResult;
use serde_json::{Map, Value, json};

use super::memo::{Memo, Rendered};
use super::watch::{QUOTE_TOOL, quote_path};
use crate::cache::readthrough::Answer;
use crate::hub::QuoteHub;
use crate::state::AppState;
use crate::upstream::client::FetchError;
use mdproxy_api::CacheStatus;
use mdproxy_api::catalog::STREAM_PATH;
use mdproxy_api::tools::Tool;

/// How a call ended, for the counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Cached(CacheStatus),
    /// The arguments name no valid request.
    BadArgument,
    /// The upstream has no answer for it (a cached or relayed "not found").
    NotFound,
    /// The upstream failed (or holds us back) and no stale answer stood in.
    Failed,
}

impl Outcome {
    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Cached(CacheStatus::Hit) => "hit",
            Outcome::Cached(CacheStatus::Stale) => "stale",
            Outcome::Cached(CacheStatus::Miss) => "miss",
            Outcome::BadArgument => "bad_argument",
            Outcome::NotFound => "not_found",
            Outcome::Failed => "failed",
        }
    }

    /// Every outcome, in counter order.
    pub const ALL: [Outcome; 6] = [
        Outcome::Cached(CacheStatus::Hit),
        Outcome::Cached(CacheStatus::Stale),
        Outcome::Cached(CacheStatus::Miss),
        Outcome::BadArgument,
        Outcome::NotFound,
        Outcome::Failed,
    ];

    pub fn index(self) -> usize {
        Outcome::ALL
            .iter()
            .position(|o| *o == self)
            .expect("every outcome is listed")
    }
}

/// What a call or a read gave: the JSON an agent gets (rendered once per cache
/// entry, [`Memo`]), how it ended and how long it stays fresh.
#[derive(Debug)]
pub struct Read {
    pub rendered: Arc<Rendered>,
    pub outcome: Outcome,
    /// How long it stays fresh, in ms: the cache entry's freshness left, the
    /// hub's spacing of polls for its board, 0 for an error.
    pub fresh_ms: u64,
}

impl Read {
    fn new(out: Value, is_error: bool, outcome: Outcome, fresh_ms: u64) -> Read {
        Read {
            rendered: Rendered::new(out, is_error),
            outcome,
            fresh_ms,
        }
    }

    /// The JSON an agent gets.
    pub fn out(&self) -> &Value {
        &self.rendered.out
    }

    /// As a tool's result: the JSON structured and as text.
    pub fn tool_result(&self) -> CallToolResult {
        self.rendered.tool_result()
    }
}

/// Calls `tool` with `arguments` through the cache (a quote the hub polls from its
/// board); results longer than `max_chars` are cut (said in the result).
pub async fn call(
    state: &AppState,
    hub: &QuoteHub,
    memo: &Memo,
    tool: &'static Tool,
    arguments: &Map<String, Value>,
    max_chars: usize,
) -> Read {
    let target = match tool.target(arguments) {
        Ok(target) => target,
        Err(e) => return bad_argument(&e.to_string()),
    };
    if tool.name == QUOTE_TOOL
        && let Some(read) = from_board(hub, &target)
    {
        return read;
    }
    read(state, memo, &target, max_chars).await
}

/// The quote of `target`'s code from the hub's board, when the hub polls it: one
/// upstream poll for every stream and agent, newer than any cached quote.
pub fn from_board(hub: &QuoteHub, target: &str) -> Option<Read> {
    let valid = mdproxy_api::parse_target(target).ok()?;
    // Only a quote: another endpoint of the same code is not the board's.
    if valid.endpoint.path != quote_path() {
        return None;
    }
    let code = valid.target.rsplit('/').next()?;
    let (row, polled_at) = hub.latest(code)?;
    let data = serde_json::from_slice::<Value>(&row).ok()?;
    let out = json!({
        "data": data,
        "asOf": polled_at.to_rfc3339_opts(SecondsFormat::Secs, true),
        "cache": Outcome::Cached(CacheStatus::Hit).as_str(),
        "source": format!(
            "{}{STREAM_PATH}?codes={code} (the quote hub's latest poll)",
            mdproxy_api::router::API_PREFIX
        ),
    });
    let fresh_ms = u64::try_from(hub.pacing().interval.as_millis()).unwrap_or(u64::MAX);
    Some(Read::new(
        out,
        false,
        Outcome::Cached(CacheStatus::Hit),
        fresh_ms,
    ))
}

/// `schema`, the quote tool's output schema, widened to an answer from the hub's
/// board: a row of the quote stream (an object), beside the endpoint's own data.
pub fn widen_for_board(schema: &mut Map<String, Value>) {
    if let Some(Value::Object(properties)) = schema.get_mut("properties")
        && let Some(data) = properties.get_mut("data")
    {
        let row = json!({
            "type": "object",
            "description": "A row of the quote hub's latest poll, as the quote stream sends it.",
        });
        *data = json!({ "anyOf": [data.take(), row] });
    }
}

/// Reads `target` (a REST target relative to `/api/v1`) through the cache, as the
/// REST request for it would; an answer rendered for the same entry before is
/// taken from `memo`.
pub async fn read(state: &AppState, memo: &Memo, target: &str, max_chars: usize) -> Read {
    let valid = match mdproxy_api::parse_target(target) {
        Ok(valid) => valid,
        Err(e) => return bad_argument(&e.to_string()),
    };
    let snap = state.snapshot();
    let cache = state.cache();
    let answer = match cache.lookup_now(&snap.policy, &valid) {
        Ok(answer) => Ok(answer),
        Err(waiting) => {
            cache
                // A tool's result is JSON in a JSON-RPC answer: no coding of the
                // entry is sent.
                .lookup_later(&snap.policy, &valid, waiting, None, Default::default)
                .await
        }
    };
    // The request as the cache keys it: what a REST client asks for the same.
    // (Written only when no rendered answer is reused: not on a call's hit.)
    let source = || format!("{}{}", mdproxy_api::router::API_PREFIX, valid.target);
    match answer {
        Ok(answer) if answer.entry.status == 200 => {
            let status = answer.served.x_cache();
            let left = answer.lifetimes.fresh_until - answer.now;
            let fresh_ms = u64::try_from(left.num_milliseconds()).unwrap_or(0);
            let render = || answered(&answer, &source(), target, max_chars);
            let rendered = memo
                .rendered(&valid.target, &answer.entry, status, render)
                .await;
            Read {
                rendered,
                outcome: Outcome::Cached(status),
                fresh_ms,
            }
        }
        Ok(_) => not_found(&source()),
        Err(error) => failed(error, &source()),
    }
}

/// The answer: the envelope's data (cut to `max_chars`), when the upstream gave it,
/// the cache's outcome, the REST request it stands for.
fn answered(answer: &Answer, source: &str, target: &str, max_chars: usize) -> Arc<Rendered> {
    let status = answer.served.x_cache();
    let data = match serde_json::from_slice::<Value>(&answer.entry.body) {
        Ok(Value::Object(mut envelope)) if envelope.contains_key("data") => {
            envelope.remove("data").unwrap_or(Value::Null)
        }
        Ok(other) => other,
        Err(_) => Value::String(String::from_utf8_lossy(&answer.entry.body).into_owned()),
    };
    let latest_last = target.contains("kline") || target.contains("/series");
    let (data, cut) = super::fit::fit(data, max_chars, latest_last);
    let mut out = json!({
        "data": data,
        "asOf": answer.entry.fetched_at.to_rfc3339_opts(SecondsFormat::Secs, true),
        "cache": Outcome::Cached(status).as_str(),
        "source": source,
    });
    if let Some(cut) = cut {
        out["cut"] = cut;
    }
    Rendered::new(out, false)
}

/// An error naming the argument, from the contract's own message.
fn bad_argument(message: &str) -> Read {
    Read::new(
        json!({ "error": "bad_argument", "message": message }),
        true,
        Outcome::BadArgument,
        0,
    )
}

fn not_found(source: &str) -> Read {
    let out = json!({
        "error": "not_found",
        "message": format!("the upstream has no answer for {source}"),
        "source": source,
    });
    Read::new(out, true, Outcome::NotFound, 0)
}

/// The upstream's failure when no stale answer could stand in, with when to try
/// again.
fn failed(error: FetchError, source: &str) -> Read {
    let (message, code, retry_after) = match error.relayed() {
        Ok((status, body)) => {
            let said = serde_json::from_slice::<Value>(&body)
                .ok()
                .and_then(|v| v["message"].as_str().map(str::to_owned))
                .unwrap_or_else(|| format!("the upstream answered HTTP {status}"));
            if status == 404 {
                return not_found(source);
            }
            (said, "upstream_error", None)
        }
        Err(other) => {
            let error = other.to_client_error();
            (error.to_string(), error.code(), error.retry_after_secs())
        }
    };
    let hint = match retry_after {
        Some(secs) => format!("try again in {secs} s"),
        None => "try again later; nothing is cached for it yet".to_owned(),
    };
    let mut out = json!({
        "error": code,
        "message": message,
        "retry": hint,
        "source": source,
    });
    if let Some(secs) = retry_after {
        out["retryAfterSecs"] = secs.into();
    }
    Read::new(out, true, Outcome::Failed, 0)
}
