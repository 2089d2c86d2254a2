//! The simulator's quote stream (`/stock/indicator/realtime/sse`): every interval the
//! requested codes' `/stock/list` rows, `pz` per event, unwrapped. The upstream
//! documents no event format; `event: quote` with a JSON array is a guess.

use std::sync::Arc;

use bytes::Bytes;
use futures_util::StreamExt;
use http::{HeaderValue, Response, header};

use super::body::{self, Body};
use super::request::{Call, Refusal, code_digits};
use super::state::Shared;
use super::universe::{Stock, universe};
use super::{api, market};

/// The stream's codes: `codes` is required (400 without it); unknown codes are left
/// out.
pub(super) fn codes(call: &Call) -> Result<Vec<&'static Stock>, Refusal> {
    Ok(call
        .query
        .required("codes")?
        .split(',')
        .filter_map(|c| code_digits(c.trim()).and_then(|d| universe().stock(d)))
        .collect())
}

/// Starts the stream for an accepted request.
pub(super) fn respond(shared: &Shared, call: &Call) -> Response<Body> {
    let codes = codes(call).unwrap_or_default();
    let pz = call.query.int("pz", 20).unwrap_or(20).clamp(1, 100) as usize;
    let clock = Arc::clone(&shared.clock);
    let stop = shared.stop.clone();
    let mut interval = tokio::time::interval(shared.stream_interval);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let first = Bytes::from_static(b"retry: 3000\n\n");
    let ticks = futures_util::stream::unfold(
        (interval, codes, clock, stop),
        move |(mut interval, codes, clock, stop)| async move {
            tokio::select! {
                _ = interval.tick() => {}
                () = stop.cancelled() => return None,
            }
            let now = clock.now();
            let mut out = String::new();
            for chunk in codes.chunks(pz) {
                let rows: Vec<serde_json::Value> =
                    chunk.iter().map(|s| api::quote_row(s, now)).collect();
                out.push_str(&format!(
                    "event: quote\nid: {}\ndata: {}\n\n",
                    now.timestamp() / market::SNAPSHOT_SECS,
                    serde_json::Value::from(rows)
                ));
            }
            if out.is_empty() {
                out.push_str(": keepalive\n\n");
            }
            Some((Bytes::from(out), (interval, codes, clock, stop)))
        },
    );
    let chunks = futures_util::stream::once(async move { first }).chain(ticks);
    let mut r = Response::new(body::stream(chunks.boxed()));
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}
