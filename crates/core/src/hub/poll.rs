//! The poll loop: while anyone is subscribed, one poll of the union per interval
//! (`hub.session_interval_ms` in session, `hub.closed_interval_ms` outside,
//! stretched to what the upstream allows: a `Retry-After` pause, a lowered pace, a
//! quota), then the stall check, the next board and its fan-out. A failing poll is
//! logged once, not once per request or per poll. The loop stops with the last
//! subscriber and, at shutdown, publishes the board that ends every stream.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::Instant;

use crate::hub::port::{Code, Pacing};
use crate::hub::source::Polled;
use crate::hub::{QuoteHub, leader};
use mdproxy_config::HubConfig;

/// How often a poll that keeps failing is logged again (with how many failed).
const REMINDER: Duration = Duration::from_secs(60);

impl QuoteHub {
    /// Polls the source for the union of codes while anyone is subscribed; ends
    /// (and lets the next subscriber start a new loop) when the last one leaves.
    /// When the hub stops, it publishes the closing board, which ends every stream.
    pub(super) async fn poll_loop(&self) {
        let state = &self.inner.state;
        let source = &*self.inner.source;
        let mut failures = Failures::default();
        // How far apart polls are: the interval, or what the upstream allows.
        let mut spacing = None;
        loop {
            let codes: Option<Vec<Code>> = {
                let reg = self.registry();
                (!reg.subscribers.is_empty() && !state.stop().is_cancelled()).then(|| reg.union())
            };
            let Some(codes) = codes else {
                // The fleet's lead goes back while this is still the hub's loop: a
                // subscriber that comes meanwhile finds it polling (and it goes
                // on), not a second loop that takes the lease just before this
                // one gives it back.
                leader::step_down(state).await;
                {
                    let mut reg = self.registry();
                    if !reg.subscribers.is_empty() && !state.stop().is_cancelled() {
                        continue;
                    }
                    reg.polling = false;
                }
                if state.stop().is_cancelled() {
                    // Every stream registered so far sees this board (a stream
                    // that registers later starts a loop of its own, which lands
                    // here too).
                    let closing = Arc::new(self.inner.board.borrow().closing());
                    self.inner.board.send_replace(Arc::clone(&closing));
                    self.fan_out(closing).await;
                    tracing::debug!("quote poll stopped: the proxy stops");
                } else {
                    tracing::debug!("quote poll stopped: no subscribers");
                }
                return;
            };
            let snap = state.snapshot();
            let config = &snap.config.hub;
            let interval =
                Duration::from_millis(if snap.policy.calendar().is_open(state.clock().now()) {
                    config.session_interval_ms
                } else {
                    config.closed_interval_ms
                });
            let (polled, following) = tokio::select! {
                polled = leader::poll(state, source, &codes, spacing.unwrap_or(interval)) => polled,
                // Streams end at once, not after a slow poll.
                () = state.stop().cancelled() => continue,
            };
            failures.note(&polled, Instant::now());
            self.inner
                .polls
                .fetch_add(polled.asked as u64, Ordering::Relaxed);
            // Before the new board: the check walks every subscriber, and after the
            // publish that walk would hold a worker at the start of the fan-out.
            self.drop_stalled(config);
            let board = {
                let mut next = self.inner.board.borrow().next(&codes, &polled.rows);
                next.polled_at = Some(state.clock().now());
                Arc::new(next)
            };
            self.inner.board.send_replace(Arc::clone(&board));
            self.fan_out(board).await;
            // What the upstream allows now, this poll's answers counted (a 429's
            // pause, a lowered pace): subscribers keep their last quotes and
            // keepalives meanwhile.
            let allowance = source.allowance(codes.len(), interval);
            let held = allowance.spacing.max(polled.hold.unwrap_or_default());
            let wait = interval.max(held);
            spacing = Some(wait);
            *self.pacing_mut() = Pacing {
                interval: wait,
                held_by: (held > interval).then(|| allowance.reason.unwrap_or("paused")),
            };
            // New codes are polled early, but never before the upstream allows.
            let earliest = Instant::now() + held;
            let mut until = Instant::now() + wait;
            loop {
                tokio::select! {
                    () = tokio::time::sleep_until(until) => break,
                    () = self.inner.wake.notified() => {
                        // New codes wait for what the upstream allows; the last
                        // subscriber leaving ends the wait at once.
                        if Instant::now() >= earliest || self.registry().subscribers.is_empty() {
                            break;
                        }
                        until = earliest;
                    }
                    () = state.stop().cancelled() => break,
                    // A follower publishes each board the leader sends, as it arrives.
                    () = leader::board_arrived(state, following) => break,
                }
            }
        }
    }

    /// Disconnects subscribers that took nothing for the stall timeout while
    /// updates were waiting for them.
    fn drop_stalled(&self, config: &HubConfig) {
        let now = self.now_ms();
        let tick = self.inner.board.borrow().tick;
        let limit = config.stall_timeout_secs * 1_000;
        let reg = self.registry();
        for (id, sub) in &reg.subscribers {
            let progress = &sub.feed.progress;
            let idle = now.saturating_sub(progress.last_ms.load(Ordering::Relaxed));
            let behind = progress.delivered_tick.load(Ordering::Relaxed) < tick;
            if idle > limit
                && behind
                && let Some(connection) = &sub.connection
                && !connection.is_closed()
            {
                tracing::warn!(
                    subscriber = id,
                    idle_ms = idle,
                    "disconnecting a stalled subscriber"
                );
                self.inner.stalled.fetch_add(1, Ordering::Relaxed);
                connection.close();
            }
        }
    }
}

/// How the polls have been going, for the log: one warning when they start to
/// fail, a reminder at most every [`REMINDER`] while they keep failing, one line
/// when they work again. A poll of many requests that fail together is one failure.
#[derive(Debug, Default)]
struct Failures {
    /// When the failing polls began, and when one was last logged.
    since: Option<(Instant, Instant)>,
    /// Failed polls since then.
    polls: u64,
}

impl Failures {
    fn note(&mut self, polled: &Polled, now: Instant) {
        if polled.failed == 0 {
            if let Some((since, _)) = self.since.take() {
                tracing::info!(
                    failed_polls = std::mem::take(&mut self.polls),
                    failing_ms = now.duration_since(since).as_millis() as u64,
                    "quote poll works again"
                );
            }
            return;
        }
        self.polls += 1;
        let error = polled.error.unwrap_or("failed");
        match &mut self.since {
            None => {
                self.since = Some((now, now));
                tracing::warn!(
                    error,
                    failed = polled.failed,
                    requests = polled.requests,
                    "quote poll failed; subscribers keep the last quotes"
                );
            }
            Some((_, logged)) if now.duration_since(*logged) >= REMINDER => {
                *logged = now;
                tracing::warn!(
                    error,
                    failed_polls = self.polls,
                    "quote poll still failing; subscribers keep the last quotes"
                );
            }
            Some(_) => {}
        }
    }
}
