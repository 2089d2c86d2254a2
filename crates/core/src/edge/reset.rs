//! How the hub hangs up on one quote stream: over HTTP/2 it resets that stream
//! alone (`RST_STREAM`), and the connection's other streams (a browser's other
//! tabs) go on; over HTTP/1.1 it closes the connection, which holds that stream
//! alone.
//!
//! The connection's executor (`streams`) runs each HTTP/2 stream as an
//! abortable future with its abort in a task-local; a quote stream's body takes it
//! at its first poll, which runs inside that stream's future.
//! Aborting the future drops hyper's handles of the stream, and h2 resets a
//! stream whose handles are all gone before it ended.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};

use bytes::Bytes;
use futures_util::future::{AbortHandle, FutureExt};
use futures_util::stream::{BoxStream, Stream, StreamExt};
use http::Version;

use crate::hub::Hangup;

tokio::task_local! {
    /// What resets the HTTP/2 stream being polled: its future's abort.
    static STREAM: AbortHandle;
}

/// `stream`'s future as the connection's executor runs it: abortable, with its
/// abort at hand while it is polled.
pub(crate) fn scoped<F>(stream: F) -> impl Future<Output = ()> + Send + 'static
where
    F: Future<Output = ()> + Send + 'static,
{
    let (stream, abort) = futures_util::future::abortable(stream);
    STREAM.scope(abort, stream.map(drop))
}

/// A quote stream's hangup: its HTTP/2 stream's reset once its body has run
/// inside it; until then (and always over HTTP/1.1) its connection's close.
#[derive(Debug)]
struct OneStream {
    stream: OnceLock<AbortHandle>,
    connection: Arc<dyn Hangup>,
}

impl Hangup for OneStream {
    fn close(&self) {
        match self.stream.get() {
            Some(stream) => stream.abort(),
            None => self.connection.close(),
        }
    }

    fn is_closed(&self) -> bool {
        match self.stream.get() {
            Some(stream) => stream.is_aborted(),
            None => self.connection.is_closed(),
        }
    }

    fn connection_key(&self) -> usize {
        self.connection.connection_key()
    }
}

/// What binds a quote stream's body (the hub's events) to the HTTP/2 stream that
/// polls it; nothing over HTTP/1.1.
pub(crate) struct Binder(Option<Arc<OneStream>>);

impl Binder {
    /// `events`, taking their stream's reset at their first poll.
    pub(crate) fn bind(self, events: BoxStream<'static, Bytes>) -> BoxStream<'static, Bytes> {
        match self.0 {
            None => events,
            Some(hangup) => Box::pin(Bound {
                events,
                hangup: Some(hangup),
            }),
        }
    }
}

/// A quote stream's events that bind its hangup to the HTTP/2 stream polling them
/// at their first poll (a wrapper of three words: an HTTP/2 subscriber holds it for
/// hours).
struct Bound {
    events: BoxStream<'static, Bytes>,
    hangup: Option<Arc<OneStream>>,
}

impl Stream for Bound {
    type Item = Bytes;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Bytes>> {
        if let Some(hangup) = self.hangup.take()
            && let Ok(abort) = STREAM.try_with(AbortHandle::clone)
        {
            let _ = hangup.stream.set(abort);
        }
        self.events.poll_next_unpin(cx)
    }
}

/// The hangup of a quote stream served on `connection` over `version` (its
/// connection's close but over HTTP/2), and what binds its body.
pub(crate) fn per_stream(
    connection: Arc<dyn Hangup>,
    version: Version,
) -> (Arc<dyn Hangup>, Binder) {
    if version != Version::HTTP_2 {
        return (connection, Binder(None));
    }
    let hangup = Arc::new(OneStream {
        stream: OnceLock::new(),
        connection,
    });
    (Arc::clone(&hangup) as Arc<dyn Hangup>, Binder(Some(hangup)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    #[derive(Debug, Default)]
    struct Connection(AtomicBool);

    impl Hangup for Connection {
        fn close(&self) {
            self.0.store(true, Ordering::Relaxed);
        }

        fn is_closed(&self) -> bool {
            self.0.load(Ordering::Relaxed)
        }
    }

    /// A body polled inside a stream's future hangs up on that stream alone: the
    /// future ends at its next poll and the connection stays; a body polled
    /// outside any (HTTP/1.1) hangs up on its connection.
    #[tokio::test]
    async fn a_stream_polled_in_its_future_is_reset_alone() {
        let connection = Arc::new(Connection::default());
        let (hangup, bind) = per_stream(Arc::clone(&connection) as _, Version::HTTP_2);
        let events = futures_util::stream::iter([Bytes::from_static(b"a")])
            .chain(futures_util::stream::pending())
            .boxed();
        let mut body = bind.bind(events);
        let (tx, rx) = tokio::sync::oneshot::channel();
        let served = tokio::spawn(scoped(async move {
            let first = body.next().await;
            let _ = tx.send(first);
            // The stream waits for more, as a quiet quote stream does.
            let _ = body.next().await;
        }));
        assert_eq!(rx.await.unwrap(), Some(Bytes::from_static(b"a")));
        assert!(!hangup.is_closed());
        hangup.close();
        served.await.expect("the stream's future ends");
        assert!(hangup.is_closed());
        assert!(!connection.is_closed(), "its connection stays");
        // The hub wakes the streams of one connection together.
        let key = (Arc::clone(&connection) as Arc<dyn Hangup>).connection_key();
        assert_eq!(hangup.connection_key(), key, "one connection's key");

        let (hangup, bind) = per_stream(Arc::clone(&connection) as _, Version::HTTP_2);
        let mut body = bind.bind(futures_util::stream::iter([Bytes::from_static(b"b")]).boxed());
        assert_eq!(body.next().await, Some(Bytes::from_static(b"b")));
        hangup.close();
        assert!(
            connection.is_closed(),
            "no stream of its own: its connection"
        );
        assert!(hangup.is_closed());

        // Over HTTP/1.1 the hangup is the connection's own.
        let other = Arc::new(Connection::default());
        let (hangup, _) = per_stream(Arc::clone(&other) as _, Version::HTTP_11);
        hangup.close();
        assert!(other.is_closed());
    }
}
