//! Ending connections: the handle that asks one connection to close now (the hub, for
//! a stalled or revoked stream; the listener, when the grace period runs out) or to
//! drain (finish what it serves, then close: the listener, at shutdown), and the two
//! wrappers that carry it out inside the connection's task. Beside the edge and the
//! hub, which both hold it, so neither imports the other for it.
//!
//! One state word and one waker per connection, the waker registered once per task:
//! on every wake of a busy connection the check is a load and a waker comparison,
//! where `Abortable` took two compare-and-swaps and hyper-util's graceful watcher a
//! `Notify` poll (about 1 % of the CPU of a small hit, measured with `perf`).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::task::{Context, Poll, Waker};

use futures_util::task::AtomicWaker;
use hyper_util::server::graceful::GracefulConnection;

/// Asked to finish what it serves and close.
const DRAIN: u8 = 1;
/// Asked to close now.
const CLOSE: u8 = 2;
/// Serving requests through a protocol that drains by itself (hyper's graceful
/// shutdown) or a stream that the hub ends; before that, a drain closes it at once.
const SERVING: u8 = 4;

#[derive(Debug, Default)]
struct Ending {
    state: AtomicU8,
    waker: AtomicWaker,
}

/// Asks one connection to end; clones share it.
#[derive(Clone, Debug, Default)]
pub struct Closer(Arc<Ending>);

/// Why a [`Closable`] task ended before its work did.
#[derive(Debug, PartialEq, Eq)]
pub struct Closed;

impl Closer {
    pub fn new() -> Closer {
        Closer::default()
    }

    /// Closes the connection at its task's next poll, in the middle of a request or not.
    pub fn close(&self) {
        self.signal(CLOSE);
    }

    /// Lets the connection finish: hyper answers the request in flight (HTTP/1.1) or
    /// the open streams after a GOAWAY (HTTP/2), then closes. A connection not yet
    /// serving (a TLS handshake, its first bytes awaited) closes at once.
    pub fn drain(&self) {
        self.signal(DRAIN);
    }

    /// Whether [`Closer::close`] was called.
    pub fn is_closed(&self) -> bool {
        self.0.state.load(Ordering::Acquire) & CLOSE != 0
    }

    /// Marks the connection as serving: from now on a drain is left to the protocol
    /// (see [`Closer::draining`]) or, for a stream on the bare socket, to the hub.
    pub fn serving(&self) {
        self.0.state.fetch_or(SERVING, Ordering::AcqRel);
    }

    fn signal(&self, bit: u8) {
        if self.0.state.fetch_or(bit, Ordering::AcqRel) & bit == 0 {
            self.0.waker.wake();
        }
    }

    /// `task`, ended when this closer closes it (or drains it before it serves).
    pub fn guard<F: Future>(&self, task: F) -> Closable<F> {
        Closable {
            task,
            ending: Arc::clone(&self.0),
            registered: None,
        }
    }

    /// A hyper connection that starts its graceful shutdown when this closer drains
    /// it. It must run inside [`Closer::guard`] of the same closer, in the same task:
    /// the guard registers the task's waker. Marks the connection as serving.
    pub fn draining<C: GracefulConnection>(&self, connection: C) -> Drainable<C> {
        self.serving();
        Drainable {
            connection,
            ending: Arc::clone(&self.0),
            drained: false,
        }
    }
}

pin_project_lite::pin_project! {
    /// A connection's whole task, ended by its [`Closer`].
    pub struct Closable<F> {
        #[pin]
        task: F,
        ending: Arc<Ending>,
        // The waker last registered: a tokio task's waker is the same from poll to
        // poll, so a busy connection registers once, not on every wake.
        registered: Option<Waker>,
    }
}

impl<F> Closable<F> {
    /// Whether the state says to stop polling the task.
    fn ends(state: u8) -> bool {
        state & CLOSE != 0 || (state & DRAIN != 0 && state & SERVING == 0)
    }
}

impl<F: Future> Future for Closable<F> {
    type Output = Result<F::Output, Closed>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let mut state = this.ending.state.load(Ordering::Acquire);
        // A signal takes the registered waker when it wakes the task: once any has
        // come, register on every poll so the next one finds a waker too. (Not
        // `SERVING`: the connection marks that itself, without a wake.)
        let known = this
            .registered
            .as_ref()
            .is_some_and(|w| w.will_wake(cx.waker()));
        if !known || state & (DRAIN | CLOSE) != 0 {
            this.ending.waker.register(cx.waker());
            *this.registered = Some(cx.waker().clone());
            // A signal made before the registration is seen here.
            state = this.ending.state.load(Ordering::Acquire);
        }
        if Self::ends(state) {
            return Poll::Ready(Err(Closed));
        }
        this.task.poll(cx).map(Ok)
    }
}

pin_project_lite::pin_project! {
    /// A hyper connection that shuts down gracefully when its closer drains it.
    pub struct Drainable<C> {
        #[pin]
        connection: C,
        ending: Arc<Ending>,
        drained: bool,
    }
}

impl<C: GracefulConnection> Future for Drainable<C> {
    type Output = C::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        if !*this.drained && this.ending.state.load(Ordering::Acquire) & DRAIN != 0 {
            *this.drained = true;
            this.connection.as_mut().graceful_shutdown();
        }
        this.connection.poll(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A task that never ends by itself.
    async fn forever() {
        std::future::pending::<()>().await;
    }

    #[tokio::test]
    async fn close_ends_a_task_that_waits_and_wakes_it() {
        let closer = Closer::new();
        let task = tokio::spawn(closer.guard(forever()));
        tokio::task::yield_now().await;
        assert!(!closer.is_closed());
        closer.close();
        assert!(closer.is_closed());
        let ended = tokio::time::timeout(std::time::Duration::from_secs(10), task)
            .await
            .expect("the close woke the task")
            .unwrap();
        assert_eq!(ended, Err(Closed));
    }

    #[tokio::test]
    async fn a_drain_ends_only_what_is_not_yet_serving_and_a_later_close_still_wakes() {
        let waiting = Closer::new();
        let task = tokio::spawn(waiting.guard(forever()));
        tokio::task::yield_now().await;
        waiting.drain();
        let ended = tokio::time::timeout(std::time::Duration::from_secs(10), task)
            .await
            .expect("the drain woke the task");
        assert_eq!(ended.unwrap(), Err(Closed));

        let serving = Closer::new();
        serving.serving();
        // Counts its polls: the drain's wake must poll it again, and leave it running.
        let polls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = {
            let polls = Arc::clone(&polls);
            std::future::poll_fn(move |_| {
                polls.fetch_add(1, Ordering::SeqCst);
                Poll::<()>::Pending
            })
        };
        let task = tokio::spawn(serving.guard(counted));
        let first = async {
            while polls.load(Ordering::SeqCst) == 0 {
                tokio::task::yield_now().await;
            }
        };
        tokio::time::timeout(std::time::Duration::from_secs(10), first)
            .await
            .expect("the task runs");
        serving.drain();
        let again = async {
            while polls.load(Ordering::SeqCst) < 2 {
                tokio::task::yield_now().await;
            }
        };
        tokio::time::timeout(std::time::Duration::from_secs(10), again)
            .await
            .expect("the drain woke the task, which polled its work again");
        assert!(
            !task.is_finished(),
            "a serving task is not ended by a drain"
        );
        // The drain's wake took the waker; the poll it caused registered it again.
        serving.close();
        let ended = tokio::time::timeout(std::time::Duration::from_secs(10), task)
            .await
            .expect("the close after a drain woke the task");
        assert_eq!(ended.unwrap(), Err(Closed));
    }

    #[tokio::test]
    async fn a_task_that_finishes_gives_its_output() {
        let closer = Closer::new();
        assert_eq!(closer.guard(async { 7 }).await, Ok(7));
    }
}
