//! The fan-out: after each new board, the poll loop writes its events to every
//! resting stream on an outlet itself, split into shares that the runtime's workers
//! take in parallel: a tick costs one non-blocking write per subscriber and no task
//! wake. What a connection does not take whole goes back to the stream's task.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::hub::QuoteHub;
use crate::hub::board::Board;
use crate::hub::stream::{Feed, Scan};

/// The fewest streams one fan-out task writes to (fewer cost more in tasks than
/// they gain in spread).
const MIN_SHARE: usize = 128;

impl QuoteHub {
    /// Writes `board`'s events to every resting stream on an outlet, in shares that
    /// the runtime's workers take in parallel (a tick's fan-out is one write per
    /// subscriber, and one core alone would take twice as long to reach the last of
    /// them). Runs after `board` is published: a stream at work misses this pass,
    /// and looks at the newest board before it rests.
    pub(super) async fn fan_out(&self, board: Arc<Board>) {
        let feeds = self.registry().outlets();
        if feeds.is_empty() {
            return;
        }
        let now_ms = self.now_ms();
        // Many small shares per worker, each a task: a worker that the machine
        // holds back leaves its remaining shares to the others, which steal them,
        // and what it holds back is one small share at most. (All of them are
        // tasks: the last one spawned waits in its worker's own slot, which no
        // other worker may steal from.)
        let workers = tokio::runtime::Handle::current().metrics().num_workers();
        let share = feeds.len().div_ceil(workers.max(1) * 16).max(MIN_SHARE);
        let shares: Vec<_> = (0..feeds.len())
            .step_by(share)
            .map(|start| {
                let (feeds, board, hub) = (Arc::clone(&feeds), Arc::clone(&board), self.clone());
                self.inner.state.tracker().spawn(async move {
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
            .collect();
        for share in shares {
            let _ = share.await;
        }
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
