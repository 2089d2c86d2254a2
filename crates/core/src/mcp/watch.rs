//! Quote resources an agent watches: a subscription to a quote resource
//! (`resources/subscribe` of the 2025 revisions, `subscriptions/listen` of
//! 2026-07-28) is a stream of the quote hub for its code, and every quote event
//! the hub sends that stream becomes a `notifications/resources/updated`. One
//! upstream poll serves every agent and every SSE subscriber of a code.

use std::future::Future;

use bytes::Bytes;
use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use rmcp::ErrorData;
use tokio_util::sync::CancellationToken;

use crate::hub::{QuoteHub, Subscription};
use mdproxy_api::tools::{RESOURCE_ROOT, find, resource_target};

/// The tool (and endpoint) whose resources can be watched.
pub const QUOTE_TOOL: &str = "get_stock_quote";

/// The catalogue path of a quote (the quote tool's endpoint).
pub fn quote_path() -> &'static str {
    find(QUOTE_TOOL).map_or("", |t| t.views[0].1)
}

/// The canonical code of the quote resource `uri`
/// (`mdproxy://api/v1/stock/indicator/realtime/600519`, a code as people type it).
///
/// # Errors
/// Invalid params when `uri` is no quote resource or its code is not one.
pub fn quote_code(uri: &str) -> Result<String, ErrorData> {
    let quote_path = quote_path();
    let not_quote = || {
        ErrorData::invalid_params(
            format!(
                "{uri} cannot be watched: only quotes can, as {RESOURCE_ROOT}{}",
                quote_path.replace("{code}", "<code>")
            ),
            None,
        )
    };
    let target = resource_target(uri).ok_or_else(not_quote)?;
    let valid = mdproxy_api::parse_target(target)
        .map_err(|e| ErrorData::invalid_params(format!("{uri}: {e}"), None))?;
    if valid.endpoint.path != quote_path {
        return Err(not_quote());
    }
    let code = valid.target.rsplit('/').next().unwrap_or_default();
    Ok(code.to_owned())
}

/// A hub stream of `code` for the client of index `client` (the hub limits
/// streams per client).
///
/// # Errors
/// The hub's refusal (the client's or the proxy's stream limit) as an internal
/// error naming it.
pub fn open(
    hub: &QuoteHub,
    client: Option<usize>,
    code: &str,
) -> Result<BoxStream<'static, Bytes>, ErrorData> {
    // The edge sets the caller of every request: without one, no client's stream
    // limit would count it (not the first key's).
    let Some(token) = client else {
        return Err(ErrorData::internal_error(
            "the request has no client key to watch under",
            None,
        ));
    };
    hub.subscribe(Subscription {
        token,
        codes: code,
        pz: 1,
        last_event_id: None,
        connection: None,
        outlet: None,
    })
    .map_err(|e| ErrorData::internal_error(format!("the quote hub refused: {e}"), None))
}

/// Whether a chunk of a hub stream is a quote event (not its `retry:` line or a
/// keepalive).
fn is_quote(chunk: &[u8]) -> bool {
    memchr::memmem::find(chunk, b"event: quote").is_some()
}

/// Calls `updated` with the index of the stream in `streams` at each quote event
/// of that stream, until `stop`, the hub's end, or `updated` says the agent is
/// gone (false).
pub async fn relay<F, Fut>(
    streams: Vec<BoxStream<'static, Bytes>>,
    stop: CancellationToken,
    mut updated: F,
) where
    F: FnMut(usize) -> Fut,
    Fut: Future<Output = bool>,
{
    let mut events = futures_util::stream::select_all(
        streams
            .into_iter()
            .enumerate()
            .map(|(i, s)| s.map(move |chunk| (i, chunk))),
    );
    loop {
        let next = tokio::select! {
            () = stop.cancelled() => return,
            next = events.next() => next,
        };
        let Some((i, chunk)) = next else { return };
        if is_quote(&chunk) && !updated(i).await {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A quote resource names its code as people type it; any other resource, or
    /// a quote of no valid code, cannot be watched.
    #[test]
    fn only_quote_resources_are_watched() {
        let root = RESOURCE_ROOT;
        assert_eq!(
            quote_code(&format!("{root}/stock/indicator/realtime/600519.SH")).unwrap(),
            quote_code(&format!("{root}/stock/indicator/realtime/600519")).unwrap()
        );
        let other = quote_code(&format!("{root}/stock/detail/600519")).unwrap_err();
        assert!(other.message.contains("only quotes"), "{}", other.message);
        assert!(quote_code(&format!("{root}/stock/indicator/realtime/xyz")).is_err());
        assert!(quote_code("file:///etc/passwd").is_err());
    }

    #[test]
    fn only_quote_events_are_updates() {
        assert!(is_quote(b"event: quote\nid: 3\ndata: [{}]\n\n"));
        assert!(!is_quote(b"retry: 3000\n\n"));
        assert!(!is_quote(b": keepalive\n\n"));
    }
}
