//! How the hub hangs up on one quote stream: over HTTP/2 it resets that stream
//! alone (`RST_STREAM`), and the connection's other streams (a browser's other
//! tabs) go on; over HTTP/1.1 it closes the connection, which holds that stream
//! alone.
//!
//! The connection's executor (`streams`) runs each HTTP/2 stream as an
//! abortable future with its [`StreamReset`] in a task-local; a quote stream's
//! body takes it at its first poll, which runs inside that stream's future.
//! Aborting the future drops hyper's handles of the stream, and h2 resets a
//! stream whose handles are all gone before it ended.

use std::future::Future;
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use futures_util::future::{AbortHandle, FutureExt};
use futures_util::stream::{BoxStream, StreamExt};

use crate::hub::Hangup;

tokio::task_local! {
    /// The HTTP/2 stream being polled.
    static STREAM: Arc<StreamReset>;
}

/// Resets one HTTP/2 stream by aborting its future.
#[derive(Debug)]
pub(crate) struct StreamReset {
    abort: AbortHandle,
}

/// `stream`'s future as the connection's executor runs it: abortable, with its
/// [`StreamReset`] at hand while it is polled.
pub(crate) fn scoped<F>(stream: F) -> impl Future<Output = ()> + Send + 'static
where
    F: Future<Output = ()> + Send + 'static,
{
    let (stream, abort) = futures_util::future::abortable(stream);
    STREAM.scope(Arc::new(StreamReset { abort }), stream.map(drop))
}

/// A quote stream's hangup: its HTTP/2 stream's reset once its body has run
/// inside it; until then (and always over HTTP/1.1) its connection's close.
#[derive(Debug)]
struct OneStream {
    stream: OnceLock<Arc<StreamReset>>,
    connection: Arc<dyn Hangup>,
}

impl Hangup for OneStream {
    fn close(&self) {
        match self.stream.get() {
            Some(stream) => stream.abort.abort(),
            None => self.connection.close(),
        }
    }

    fn is_closed(&self) -> bool {
        match self.stream.get() {
            Some(stream) => stream.abort.is_aborted(),
            None => self.connection.is_closed(),
        }
    }
}

/// The hangup of a quote stream served on `connection`, and what binds its body
/// (the hub's events) to the HTTP/2 stream that polls it.
pub(crate) fn per_stream(
    connection: Arc<dyn Hangup>,
) -> (
    Arc<dyn Hangup>,
    impl FnOnce(BoxStream<'static, Bytes>) -> BoxStream<'static, Bytes>,
) {
    let hangup = Arc::new(OneStream {
        stream: OnceLock::new(),
        connection,
    });
    let bound = Arc::clone(&hangup);
    let bind = move |events: BoxStream<'static, Bytes>| {
        let first = futures_util::stream::once(async move {
            if let Ok(stream) = STREAM.try_with(Arc::clone) {
                let _ = bound.stream.set(stream);
            }
        });
        first
            .filter_map(|()| std::future::ready(None))
            .chain(events)
            .boxed()
    };
    (hangup, bind)
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
        let (hangup, bind) = per_stream(Arc::clone(&connection) as Arc<dyn Hangup>);
        let events = futures_util::stream::iter([Bytes::from_static(b"a")])
            .chain(futures_util::stream::pending())
            .boxed();
        let mut body = bind(events);
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

        let (hangup, bind) = per_stream(Arc::clone(&connection) as Arc<dyn Hangup>);
        let mut body = bind(futures_util::stream::iter([Bytes::from_static(b"b")]).boxed());
        assert_eq!(body.next().await, Some(Bytes::from_static(b"b")));
        hangup.close();
        assert!(
            connection.is_closed(),
            "no stream of its own: its connection"
        );
        assert!(hangup.is_closed());
    }
}
