//! Request correlation toward the upstream: the request ID and the W3C trace context
//! (`traceparent`) of the client request that caused an upstream request, carried in
//! a task-local from the edge to the upstream client (with the single flight's
//! work, on whichever task runs it), so the upstream's logs can be matched with ours.

use std::future::Future;

use futures_util::future::Either;
use http::{HeaderName, HeaderValue};

/// `X-Request-Id`: the client's, or one made for its request; passed on upstream.
pub const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// `traceparent`: the W3C trace context, read from a client and passed on upstream
/// as its child (names made at compile time: one given as text is parsed per use).
pub const TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");

tokio::task_local! {
    static CONTEXT: Context;
}

/// What one client request hands on to the upstream requests it causes.
#[derive(Clone, Debug, Default)]
pub struct Context {
    /// The request's ID (`X-Request-Id`, the client's or ours).
    pub request_id: Option<HeaderValue>,
    /// The client's trace ID and flags, when it sent a valid `traceparent`.
    pub trace: Option<Traceparent>,
}

/// A valid W3C `traceparent`'s trace ID and flags (the parent ID is replaced by
/// ours on the way upstream).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Traceparent {
    trace_id: [u8; 32],
    flags: [u8; 2],
}

impl Traceparent {
    /// Parses a `traceparent` as W3C Trace Context asks (§3.2.2.1, §4.3):
    /// `<version>-<32 hex>-<16 hex>-<2 hex>`, lowercase, IDs not all zero. Version
    /// `00` is exactly that; a later version (`01` to `fe`) may carry more fields
    /// after the flags, each behind a dash, which are ignored (the part we know is
    /// read as version `00`); `ff` is invalid. `None` for anything else, which is
    /// then ignored as the spec says.
    pub fn parse(value: &[u8]) -> Option<Traceparent> {
        let is_hex = |b: &[u8]| b.iter().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'));
        let all_zero = |b: &[u8]| b.iter().all(|c| *c == b'0');
        let version = value.get(..2)?;
        if !is_hex(version) || version == b"ff" {
            return None;
        }
        let known = match value.len() {
            55 => value,
            // A later version's own fields start after a dash; version 00 has none.
            n if n > 55 && version != b"00" && value[55] == b'-' => &value[..55],
            _ => return None,
        };
        if known[2] != b'-' || known[35] != b'-' || known[52] != b'-' {
            return None;
        }
        let (trace, parent, flags) = (&known[3..35], &known[36..52], &known[53..55]);
        if !(is_hex(trace) && is_hex(parent) && is_hex(flags))
            || all_zero(trace)
            || all_zero(parent)
        {
            return None;
        }
        Some(Traceparent {
            trace_id: trace.try_into().ok()?,
            flags: flags.try_into().ok()?,
        })
    }

    /// The trace ID, as hex.
    pub fn trace_id(&self) -> &str {
        std::str::from_utf8(&self.trace_id).unwrap_or_default()
    }

    /// The header for an upstream request while traces are off: version `00`, the
    /// same trace, a new parent ID (our request to the upstream), and only the
    /// sampled flag kept (the spec has the others zeroed: their meaning is not ours
    /// to pass on).
    pub fn child(&self) -> HeaderValue {
        let flags = std::str::from_utf8(&self.flags)
            .ok()
            .and_then(|f| u8::from_str_radix(f, 16).ok())
            .unwrap_or(0);
        let value = format!(
            "00-{}-{:016x}-{:02x}",
            self.trace_id(),
            fastrand::u64(1..),
            flags & 1
        );
        HeaderValue::from_str(&value).expect("hex and dashes are a valid header value")
    }
}

/// The context of the client request this task serves, if any.
pub fn current() -> Option<Context> {
    CONTEXT.try_with(Context::clone).ok()
}

/// Runs `f` with `context` as the current one (`None`: as it is). Not an `async
/// fn`: one would hold `f` twice (as its argument and as what it awaits), and a
/// fill's future, moved into its flight whole, weighed twice as much for it.
pub fn within<F: Future>(context: Option<Context>, f: F) -> impl Future<Output = F::Output> {
    match context {
        Some(context) => Either::Left(CONTEXT.scope(context, f)),
        None => Either::Right(f),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparent_is_parsed_as_w3c_asks_and_continued_with_a_new_parent() {
        let t =
            Traceparent::parse(b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").unwrap();
        assert_eq!(t.trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736");
        let child = t.child();
        let child = child.to_str().unwrap();
        assert!(
            child.starts_with("00-4bf92f3577b34da6a3ce929d0e0e4736-"),
            "{child}"
        );
        assert!(child.ends_with("-01"));
        assert_ne!(&child[36..52], "00f067aa0ba902b7");
        assert!(Traceparent::parse(child.as_bytes()).is_some());
        // A later version: read as 00, extra fields ignored; passed on as 00 with
        // only the sampled flag.
        for later in [
            &b"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"[..],
            b"cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-03-what-the-future-holds",
        ] {
            let t = Traceparent::parse(later).unwrap();
            assert_eq!(t.trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736");
            let child = t.child();
            let child = child.to_str().unwrap();
            assert!(
                child.starts_with("00-4bf92f") && child.ends_with("-01"),
                "{child}"
            );
        }
        for bad in [
            &b"00-00000000000000000000000000000000-00f067aa0ba902b7-01"[..],
            b"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            // Version 00 has nothing after the flags; `ff` is no version; a later
            // version's extra fields start with a dash.
            b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-ab",
            b"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            b"cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",
            b"cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0",
            b"0-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            b"CC-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            b"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            b"",
        ] {
            assert!(Traceparent::parse(bad).is_none(), "{bad:?}");
        }
    }

    #[tokio::test]
    async fn the_context_follows_the_future_it_scopes() {
        assert!(current().is_none());
        let context = Context {
            request_id: Some(HeaderValue::from_static("abc")),
            trace: None,
        };
        let seen = within(Some(context), async { current() }).await;
        assert_eq!(seen.unwrap().request_id.unwrap(), "abc");
    }
}
