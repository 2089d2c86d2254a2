//! Request correlation toward the upstream: the request ID and the W3C trace context
//! (`traceparent`) of the client request that caused an upstream request, carried in
//! a task-local from the edge to the upstream client (through the single flight's
//! own task), so the upstream's logs can be matched with ours.

use std::future::Future;

use http::HeaderValue;

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
    /// Parses version `00` (`00-<32 hex>-<16 hex>-<2 hex>`, IDs not all zero);
    /// `None` for anything else, which is then ignored as the spec says.
    pub fn parse(value: &[u8]) -> Option<Traceparent> {
        let is_hex = |b: &[u8]| b.iter().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'));
        let all_zero = |b: &[u8]| b.iter().all(|c| *c == b'0');
        if value.len() != 55 || &value[..3] != b"00-" || value[35] != b'-' || value[52] != b'-' {
            return None;
        }
        let (trace, parent, flags) = (&value[3..35], &value[36..52], &value[53..55]);
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

    /// The header for an upstream request: the same trace, a new parent ID (the
    /// span of our request to the upstream).
    pub fn child(&self) -> HeaderValue {
        let value = format!(
            "00-{}-{:016x}-{}",
            self.trace_id(),
            fastrand::u64(1..),
            std::str::from_utf8(&self.flags).unwrap_or("00")
        );
        HeaderValue::from_str(&value).expect("hex and dashes are a valid header value")
    }
}

/// The context of the client request this task serves, if any.
pub fn current() -> Option<Context> {
    CONTEXT.try_with(Context::clone).ok()
}

/// Runs `f` with `context` as the current one (`None`: as it is).
pub async fn within<F: Future>(context: Option<Context>, f: F) -> F::Output {
    match context {
        Some(context) => CONTEXT.scope(context, f).await,
        None => f.await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparent_is_parsed_strictly_and_continued_with_a_new_parent() {
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
        for bad in [
            &b"00-00000000000000000000000000000000-00f067aa0ba902b7-01"[..],
            b"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            b"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
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
