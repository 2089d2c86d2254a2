//! The streams of one HTTP/2 connection run in that connection's own task, each
//! ready stream polled before the connection in every turn of it.
//!
//! hyper runs each HTTP/2 stream as a future handed to its executor; with
//! `TokioExecutor` each is a task of its own: a spawn per request, and every frame
//! a stream queues wakes the connection's task, which tokio runs next (often on the
//! other worker), so a quote tick to 10,000 subscribers on 100 connections was
//! 10,000 stream tasks and as many turns of connection tasks. Here the executor of
//! an HTTP/2 connection keeps its streams, and [`Drive`] polls every stream that is
//! ready, then the connection once for all of their frames. Streams of one
//! connection share a task (and so a worker thread), as they already share the
//! connection's lock in h2. h2 still writes each DATA frame over 256 bytes with a
//! `writev` of its own (it chains such a payload rather than copying it).
//! Measured in docs/BENCHMARKS.md (the quote stream; HTTP/2 hits).

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use futures_util::future::{BoxFuture, FutureExt};
use futures_util::stream::{FuturesUnordered, StreamExt};
use futures_util::task::AtomicWaker;

/// How many rounds of new streams one poll takes before it yields to the runtime.
const ROUNDS_PER_POLL: usize = 8;

/// Streams handed over by hyper, not yet polled, and the waker of their task.
#[derive(Default)]
struct Inbox {
    new: Mutex<Vec<BoxFuture<'static, ()>>>,
    waker: AtomicWaker,
}

/// The executor of one HTTP/2 connection: keeps the streams hyper starts for
/// [`Drive`] to poll.
#[derive(Clone, Default)]
pub(crate) struct ConnExecutor {
    inbox: Arc<Inbox>,
}

impl<F> hyper::rt::Executor<F> for ConnExecutor
where
    F: Future<Output = ()> + Send + 'static,
{
    fn execute(&self, stream: F) {
        // A stream that panics ends alone, as a task of its own would: the
        // connection and its other streams go on.
        let stream = AssertUnwindSafe(stream).catch_unwind().map(drop);
        self.inbox
            .new
            .lock()
            .expect("the inbox lock is never poisoned")
            .push(Box::pin(stream));
        self.inbox.waker.wake();
    }
}

impl ConnExecutor {
    /// The future that runs `connection` and the streams it hands to this executor.
    pub(crate) fn drive<C>(&self, connection: C) -> Drive<C> {
        Drive {
            connection: Box::pin(connection),
            inbox: Arc::clone(&self.inbox),
            running: FuturesUnordered::new(),
        }
    }
}

/// A connection with its streams: polls each ready stream, then the connection.
/// Ends with the connection (hyper's HTTP/2 connection ends once its streams have,
/// or once the peer is gone, when what is left of them cannot be sent anyway).
pub(crate) struct Drive<C> {
    connection: Pin<Box<C>>,
    inbox: Arc<Inbox>,
    running: FuturesUnordered<BoxFuture<'static, ()>>,
}

impl<C: Future> Future for Drive<C> {
    type Output = C::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<C::Output> {
        let this = &mut *self;
        this.inbox.waker.register(cx.waker());
        for _ in 0..ROUNDS_PER_POLL {
            let new = std::mem::take(
                &mut *this
                    .inbox
                    .new
                    .lock()
                    .expect("the inbox lock is never poisoned"),
            );
            this.running.extend(new);
            // Every stream that is ready queues its frames first...
            while let Poll::Ready(Some(())) = this.running.poll_next_unpin(cx) {}
            // ...then the connection writes them, and may start new streams.
            if let Poll::Ready(done) = this.connection.as_mut().poll(cx) {
                return Poll::Ready(done);
            }
            if this
                .inbox
                .new
                .lock()
                .expect("the inbox lock is never poisoned")
                .is_empty()
            {
                return Poll::Pending;
            }
        }
        // A busy connection yields to the others; its new streams wait one turn.
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::rt::Executor;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::task::Waker;

    type Log = Arc<Mutex<Vec<&'static str>>>;

    /// What the streams wait for: a quote tick, opened from outside their task.
    #[derive(Default)]
    struct Tick {
        open: AtomicBool,
        wakers: Mutex<Vec<Waker>>,
    }

    impl Tick {
        fn fire(&self) {
            self.open.store(true, Ordering::SeqCst);
            for waker in self.wakers.lock().unwrap().drain(..) {
                waker.wake();
            }
        }
    }

    /// A stream that queues one frame when the tick comes, then ends.
    fn stream(tick: &Arc<Tick>, log: &Log) -> impl Future<Output = ()> + Send + 'static {
        let (tick, log) = (Arc::clone(tick), Arc::clone(log));
        std::future::poll_fn(move |cx| {
            if tick.open.load(Ordering::SeqCst) {
                log.lock().unwrap().push("frame");
                return Poll::Ready(());
            }
            tick.wakers.lock().unwrap().push(cx.waker().clone());
            Poll::Pending
        })
    }

    /// A connection that notes each poll (where it would write what is queued),
    /// and starts one stream on its first poll, as hyper does on a request.
    fn connection(
        executor: &ConnExecutor,
        tick: &Arc<Tick>,
        log: &Log,
    ) -> impl Future<Output = ()> {
        let (executor, tick, log) = (executor.clone(), Arc::clone(tick), Arc::clone(log));
        let mut first = true;
        std::future::poll_fn(move |_cx| {
            log.lock().unwrap().push("write");
            if std::mem::take(&mut first) {
                executor.execute(stream(&tick, &log));
            }
            Poll::Pending
        })
    }

    /// When a tick wakes a connection's streams, one poll of its task runs every
    /// one of them before the connection writes: their frames leave in one write.
    #[test]
    fn a_ticks_frames_are_queued_before_the_connection_writes() {
        let executor = ConnExecutor::default();
        let (tick, log) = (Arc::new(Tick::default()), Log::default());
        executor.execute(stream(&tick, &log));
        executor.execute(stream(&tick, &log));
        let mut drive = std::pin::pin!(executor.drive(connection(&executor, &tick, &log)));
        let waker = futures_util::task::noop_waker();
        let mut cx = Context::from_waker(&waker);

        assert!(drive.as_mut().poll(&mut cx).is_pending());
        // The stream started by the connection was polled in the same turn.
        assert_eq!(tick.wakers.lock().unwrap().len(), 3);
        assert_eq!(*log.lock().unwrap(), ["write", "write"]);

        tick.fire();
        assert!(drive.as_mut().poll(&mut cx).is_pending());
        assert_eq!(
            *log.lock().unwrap(),
            ["write", "write", "frame", "frame", "frame", "write"]
        );
    }

    /// A stream that panics ends alone; the connection's other streams go on.
    #[test]
    fn a_panicking_stream_ends_alone() {
        let executor = ConnExecutor::default();
        let (tick, log) = (Arc::new(Tick::default()), Log::default());
        executor.execute(async { panic!("a handler's bug") });
        executor.execute(stream(&tick, &log));
        let mut drive = std::pin::pin!(executor.drive(connection(&executor, &tick, &log)));
        let waker = futures_util::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        assert!(drive.as_mut().poll(&mut cx).is_pending());
        tick.fire();
        assert!(drive.as_mut().poll(&mut cx).is_pending());
        assert_eq!(
            *log.lock().unwrap(),
            ["write", "write", "frame", "frame", "write"]
        );
    }

    /// The drive ends with its connection, in a runtime as in the server.
    #[tokio::test]
    async fn the_drive_ends_with_the_connection() {
        let executor = ConnExecutor::default();
        let (tick, log) = (Arc::new(Tick::default()), Log::default());
        executor.execute(stream(&tick, &log));
        let mut polls = 0;
        let connection = std::future::poll_fn(move |cx| {
            polls += 1;
            if polls == 3 {
                return Poll::Ready(polls);
            }
            cx.waker().wake_by_ref();
            Poll::Pending
        });
        let ended = tokio::time::timeout(
            std::time::Duration::from_secs(10),
            executor.drive(connection),
        )
        .await;
        assert_eq!(ended, Ok(3));
    }

    /// A connection that keeps starting streams yields to the runtime after a few
    /// rounds instead of holding the worker.
    #[test]
    fn a_busy_connection_yields() {
        let executor = ConnExecutor::default();
        let done = Arc::new(AtomicUsize::new(0));
        let (spawner, counted) = (executor.clone(), Arc::clone(&done));
        let connection = std::future::poll_fn(move |_cx| {
            let counted = Arc::clone(&counted);
            spawner.execute(async move {
                counted.fetch_add(1, Ordering::SeqCst);
            });
            Poll::<()>::Pending
        });
        let mut drive = std::pin::pin!(executor.drive(connection));
        let waker = futures_util::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        assert!(drive.as_mut().poll(&mut cx).is_pending());
        assert_eq!(
            done.load(Ordering::SeqCst),
            ROUNDS_PER_POLL - 1,
            "the last round's stream waits a turn"
        );
    }
}
