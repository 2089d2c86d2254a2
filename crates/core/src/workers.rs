//! The serving threads: one single-threaded runtime a core, over which the client
//! listener spreads its connections, as nginx's workers and pingora without work
//! stealing do: a connection, its fills and its upstream connections stay on one
//! thread, and no request's work crosses a core. Everything else (the hub's poll,
//! the scheduler, the fleet's link) runs on the process's shared runtime.

use std::cell::Cell;
use std::future::Future;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::runtime::Handle;
use tokio::task::JoinHandle;
use tokio_util::sync::{CancellationToken, DropGuard};

thread_local! {
    /// The index of the serving thread this is, or `None` on any other thread.
    static WORKER: Cell<Option<usize>> = const { Cell::new(None) };
}

/// The index of the serving thread the caller runs on, if it runs on one.
#[must_use]
pub fn current() -> Option<usize> {
    WORKER.with(Cell::get)
}

/// Why the serving threads did not start.
#[derive(Debug, thiserror::Error)]
#[error("cannot start serving thread {index}: {source}")]
pub struct StartError {
    index: usize,
    #[source]
    source: std::io::Error,
}

/// Single-threaded runtimes on threads of their own; connections are handed to
/// them in turn. When the last clone is dropped, each thread drops its runtime, and
/// with it every task still on it.
#[derive(Clone)]
pub struct Workers {
    handles: Arc<[Handle]>,
    next: Arc<AtomicUsize>,
    _stop: Arc<DropGuard>,
}

impl std::fmt::Debug for Workers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Workers")
            .field("threads", &self.handles.len())
            .finish_non_exhaustive()
    }
}

impl Workers {
    /// Starts `threads` serving threads, or one a core the process may use when
    /// `threads` is 0.
    ///
    /// # Errors
    /// When a runtime or its thread cannot start.
    pub fn start(threads: usize) -> Result<Workers, StartError> {
        let threads = match threads {
            0 => std::thread::available_parallelism().map_or(1, NonZeroUsize::get),
            n => n,
        };
        let stop = CancellationToken::new();
        let mut handles = Vec::with_capacity(threads);
        for index in 0..threads {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|source| StartError { index, source })?;
            handles.push(runtime.handle().clone());
            let stopped = stop.clone();
            std::thread::Builder::new()
                .name(format!("mdproxy-serve-{index}"))
                .spawn(move || {
                    WORKER.with(|w| w.set(Some(index)));
                    runtime.block_on(stopped.cancelled());
                })
                .map_err(|source| StartError { index, source })?;
        }
        Ok(Workers {
            handles: handles.into(),
            next: Arc::new(AtomicUsize::new(0)),
            _stop: Arc::new(stop.drop_guard()),
        })
    }

    /// How many serving threads there are.
    #[must_use]
    pub fn threads(&self) -> usize {
        self.handles.len()
    }

    /// Runs `task` on the next serving thread in turn.
    pub fn spawn<F>(&self, task: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let at = self.next.fetch_add(1, Ordering::Relaxed) % self.handles.len();
        self.handles[at].spawn(task)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::time::Duration;

    /// A runtime of the test's own, as the listener's shared one.
    fn shared() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    #[test]
    fn tasks_go_to_each_thread_in_turn_and_know_which_it_is() {
        let workers = Workers::start(2).unwrap();
        assert_eq!(workers.threads(), 2);
        assert_eq!(current(), None, "the test's thread serves nothing");
        let seen = shared().block_on(async {
            let mut seen = Vec::new();
            for _ in 0..4 {
                let here = workers.spawn(async {
                    let name = std::thread::current().name().map(str::to_owned);
                    (current(), name)
                });
                seen.push(here.await.unwrap());
            }
            seen
        });
        let name = |i: usize| Some(format!("mdproxy-serve-{i}"));
        assert_eq!(
            seen,
            [
                (Some(0), name(0)),
                (Some(1), name(1)),
                (Some(0), name(0)),
                (Some(1), name(1)),
            ]
        );
    }

    #[test]
    fn none_asked_is_one_a_core() {
        let cores = std::thread::available_parallelism().map_or(1, NonZeroUsize::get);
        assert_eq!(Workers::start(0).unwrap().threads(), cores);
    }

    /// Dropping the last clone ends the threads and drops the tasks left on them
    /// (a connection still open past the listener's grace).
    #[test]
    fn the_last_clone_dropped_ends_the_threads_and_their_tasks() {
        let workers = Workers::start(1).unwrap();
        let clone = workers.clone();
        let (held, released) = tokio::sync::oneshot::channel::<()>();
        let (started, running) = std::sync::mpsc::channel();
        workers.spawn(async move {
            let _held = held;
            started.send(()).unwrap();
            std::future::pending::<()>().await;
        });
        running.recv_timeout(Duration::from_secs(10)).unwrap();
        drop(workers);
        let runtime = shared();
        let mut released = released;
        let mut within =
            |limit| runtime.block_on(async { tokio::time::timeout(limit, &mut released).await });
        let early = within(Duration::from_millis(100));
        assert!(early.is_err(), "a clone still holds the threads");
        drop(clone);
        // The task's sender is dropped with its thread's runtime: the receiver is told.
        let late = within(Duration::from_secs(10));
        assert!(matches!(late, Ok(Err(_))), "{late:?}");
    }
}
