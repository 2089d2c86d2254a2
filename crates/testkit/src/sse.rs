//! Server-sent events for tests: a reader that cuts a streaming body into events
//! (fields parsed by the `eventsource-stream` crate), comments and `retry:` kept.

use std::time::Duration;

/// One server-sent event.
#[derive(Debug, Clone, Default)]
pub struct Event {
    /// The `event:` field ("" for a block without data, such as a keepalive).
    pub event: String,
    pub id: String,
    pub data: String,
    /// Comment lines (keepalives) and `retry:` come as their own "events".
    pub comment: bool,
    pub retry: Option<u64>,
}

impl Event {
    /// The quotes of a `quote` event.
    pub fn quotes(&self) -> Vec<serde_json::Value> {
        serde_json::from_str::<Vec<serde_json::Value>>(&self.data).unwrap()
    }

    /// The codes of a `quote` event's upstream rows, as the simulator writes them
    /// (six digits: its universe holds stocks only, so they are unique).
    pub fn codes(&self) -> Vec<String> {
        self.quotes().iter().map(row_code).collect()
    }
}

/// The `code` of an upstream quote row, read as the simulator wrote it (not with
/// the proxy's own parsing: the test is the oracle).
pub fn row_code(row: &serde_json::Value) -> String {
    row["code"]
        .as_str()
        .expect("a quote row has a code")
        .to_owned()
}

/// What reading a stream gave: an event, its clean end, a broken body, or nothing
/// within the wait (a stream that stays silent has not ended).
#[derive(Debug)]
pub enum Next {
    Event(Event),
    End,
    Broken(String),
    Timeout,
}

/// Reads events from a streaming response.
///
/// Fields are parsed by the `eventsource-stream` crate. That crate follows the
/// EventSource spec and dispatches only blocks that carry `data:`, so comments
/// (keepalives) and a `retry:` alone never reach its caller. Tests check both, so
/// this reader cuts the body into blocks (at a blank line), hands each block to the
/// crate, and for a block the crate does not dispatch asks it again with an empty
/// `data:` line added: the crate still parses `retry:`/`id:`, and the result comes
/// back as an event with empty `event` and `data`. `comment` is set when the block
/// had a line starting with `:` (the one thing the crate drops outright).
pub struct SseReader {
    response: reqwest::Response,
    buffer: Vec<u8>,
    ended: bool,
}

/// Where the first blank line (LF LF, CR LF CR LF or CR CR) of `buf` starts, and
/// how long it is.
fn block_end(buf: &[u8]) -> Option<(usize, usize)> {
    [&b"\n\n"[..], b"\r\n\r\n", b"\r\r"]
        .iter()
        .filter_map(|sep| {
            buf.windows(sep.len())
                .position(|w| w == *sep)
                .map(|at| (at, sep.len()))
        })
        .min()
}

/// The events the crate dispatches for `bytes` (one complete input).
fn crate_events(bytes: Vec<u8>) -> Vec<eventsource_stream::Event> {
    use eventsource_stream::Eventsource;
    use futures_util::{FutureExt, StreamExt};
    let stream = futures_util::stream::iter([Ok::<_, std::convert::Infallible>(bytes)]);
    stream
        .eventsource()
        .map(|e| e.expect("a valid event stream"))
        .collect::<Vec<_>>()
        .now_or_never()
        .expect("parsing an in-memory block does not wait")
}

/// One block (without its terminating blank line) as an [`Event`].
fn parse_block(content: &[u8]) -> Event {
    let comment = content
        .split(|b| *b == b'\n' || *b == b'\r')
        .any(|line| line.first() == Some(&b':'));
    let mut whole = content.to_vec();
    whole.extend_from_slice(b"\n\n");
    let mut events = crate_events(whole);
    assert!(events.len() <= 1, "one block is at most one event");
    let (e, has_data) = match events.pop() {
        Some(e) => (e, true),
        None => {
            let mut probe = content.to_vec();
            probe.extend_from_slice(b"\ndata:\n\n");
            let e = crate_events(probe)
                .pop()
                .expect("a block with a data line is dispatched");
            (e, false)
        }
    };
    Event {
        event: if has_data { e.event } else { String::new() },
        id: e.id,
        data: if has_data { e.data } else { String::new() },
        comment,
        retry: e.retry.map(|d| d.as_millis() as u64),
    }
}

impl SseReader {
    pub fn new(response: reqwest::Response) -> SseReader {
        SseReader {
            response,
            buffer: Vec::new(),
            ended: false,
        }
    }

    /// The next event, or why there is none within `wait`.
    pub async fn next_or_end(&mut self, wait: Duration) -> Next {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            if let Some((at, len)) = block_end(&self.buffer) {
                let block: Vec<u8> = self.buffer.drain(..at + len).collect();
                return Next::Event(parse_block(&block[..at]));
            }
            if self.ended {
                // An unfinished block at the end is discarded, as the spec says.
                return Next::End;
            }
            match tokio::time::timeout_at(deadline, self.response.chunk()).await {
                Err(_) => return Next::Timeout,
                Ok(Err(e)) => return Next::Broken(e.to_string()),
                Ok(Ok(None)) => self.ended = true,
                Ok(Ok(Some(chunk))) => self.buffer.extend_from_slice(&chunk),
            }
        }
    }

    /// The next event, or `None` when the stream ends or `wait` passes.
    pub async fn next(&mut self, wait: Duration) -> Option<Event> {
        match self.next_or_end(wait).await {
            Next::Event(e) => Some(e),
            Next::End | Next::Broken(_) | Next::Timeout => None,
        }
    }

    /// The next `quote` event, skipping retry and keepalive lines.
    pub async fn next_quote(&mut self, wait: Duration) -> Option<Event> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let e = self.next(left).await?;
            if e.event == "quote" {
                return Some(e);
            }
        }
    }
}
