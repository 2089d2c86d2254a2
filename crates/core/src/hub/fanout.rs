//! The fan-out: after each new board, the poll loop writes its events to every
//! resting stream on an outlet itself, split into shares that the runtime's workers
//! take in parallel: a tick costs one non-blocking write per subscriber and no task
//! wake. What a connection does not take whole goes back to the stream's task.
//! Streams without an outlet are woken, one connection's after another.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::hub::QuoteHub;
use crate::hub::board::Board;
use crate::hub::registry::Reach;
use crate::hub::stream::{Feed, Scan};

/// The fewest streams one fan-out task writes to (fewer cost more in tasks than
/// they gain in spread).
const MIN_SHARE: usize = 128;

impl QuoteHub {
    /// Writes `board`'s events to every resting stream on an outlet, in shares that
    /// the runtime's workers take in parallel (a tick's fan-out is one write per
    /// subscriber, and one core alone would take twice as long to reach the last of
    /// them), then wakes every stream without an outlet, the streams of one
    /// connection one after another. Runs after `board` is published: a stream at
    /// work misses this pass, and looks at the newest board before it rests.
    pub(super) async fn fan_out(&self, board: Arc<Board>) {
        let reach = self.registry().reach();
        let shares = self.push_shares(&reach, &board);
        // A woken stream's task reads the newest board. Woken in a row, one
        // connection's streams are all ready by the time its task runs (a worker
        // that wakes the next connection's hands this one to the other worker): an
        // HTTP/2 connection takes its whole tick in one turn, not a turn for each
        // few streams that the board's watch happened to wake together.
        for feed in &reach.woken {
            feed.board.notify_one();
        }
        for share in shares {
            let _ = share.await;
        }
    }

    /// Spawns the writes to the streams on an outlet, in shares.
    fn push_shares(
        &self,
        reach: &Arc<Reach>,
        board: &Arc<Board>,
    ) -> Vec<tokio::task::JoinHandle<()>> {
        let feeds = &reach.outlets;
        if feeds.is_empty() {
            return Vec::new();
        }
        let now_ms = self.now_ms();
        // Many small shares per worker, each a task: a worker that the machine
        // holds back leaves its remaining shares to the others, which steal them,
        // and what it holds back is one small share at most. (All of them are
        // tasks: the last one spawned waits in its worker's own slot, which no
        // other worker may steal from.)
        let workers = tokio::runtime::Handle::current().metrics().num_workers();
        let share = feeds.len().div_ceil(workers.max(1) * 16).max(MIN_SHARE);
        (0..feeds.len())
            .step_by(share)
            .map(|start| {
                let (reach, board, hub) = (Arc::clone(reach), Arc::clone(board), self.clone());
                self.inner.state.tracker().spawn(async move {
                    let feeds = &reach.outlets;
                    let end = (start + share).min(feeds.len());
                    let partial = feeds[start..end]
                        .iter()
                        .filter(|feed| feed.push(&board, now_ms))
                        .count();
                    if partial > 0 {
                        hub.inner
                            .partial_writes
                            .fetch_add(partial as u64, Ordering::Relaxed);
                    }
                })
            })
            .collect()
    }
}

impl Feed {
    /// The fan-out's part: when the stream rests, writes `board`'s events for it to
    /// its outlet; what the connection does not take goes back to the stream's task
    /// (which the closing board ends as well). Returns whether the connection took
    /// part of an event (and its rest went back to the task).
    fn push(&self, board: &Arc<Board>, now_ms: u64) -> bool {
        let Some(outlet) = &self.outlet else {
            return false;
        };
        let mut cursor = self.cursor();
        if !cursor.pushed {
            return false;
        }
        let mut partial = false;
        if !board.closing {
            cursor.scan = Some(Scan::changes(Arc::clone(board)));
            loop {
                let Some(event) = self.next_event(&mut cursor) else {
                    return false;
                };
                // Would block, or failed: the task's own write finds out which.
                let written = outlet.try_write(&event).unwrap_or(0);
                if written > 0 {
                    self.progress.last_ms.store(now_ms, Ordering::Relaxed);
                }
                if written == event.len() {
                    continue;
                }
                partial = written > 0;
                self.hold(&mut cursor, event.slice(written..));
                break;
            }
        }
        cursor.pushed = false;
        drop(cursor);
        self.kick.notify_one();
        partial
    }
}
