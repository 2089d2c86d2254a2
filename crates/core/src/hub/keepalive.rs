//! The keepalive sweep: while anyone is subscribed, a walk over the subscribers every
//! eighth of `hub.keepalive_secs` that kicks each stream whose last send is a period
//! old, so that it sends a keepalive comment. One walk instead of a timer a stream:
//! a busy stream's timer found nothing due each period and was set again, and each
//! firing woke its connection's task (10,000 wakeups a period at 10,000 subscribers,
//! the quote stream's worst ticks over HTTP/2; docs/BENCHMARKS.md).

use std::time::Duration;

use crate::hub::QuoteHub;

/// The shortest time between two sweeps (the period's eighth, for a short period).
const MIN_SWEEP: Duration = Duration::from_millis(100);

impl QuoteHub {
    /// The poll loop and the keepalive sweep, which ends with it (when the last
    /// subscriber leaves, or the hub stops).
    pub(super) async fn run(&self) {
        tokio::select! {
            () = self.poll_loop() => {}
            () = self.keep_alive() => {}
        }
    }

    /// Kicks every stream whose keepalive is due, every eighth of the period (the
    /// slack each stream's period already has: a keepalive goes at most that late).
    /// The period is the shortest of the configured one and those of the streams
    /// the last sweep walked: a stream keeps the period it opened with, so after a
    /// reload that lengthens `hub.keepalive_secs` the streams opened before still
    /// get theirs on time.
    async fn keep_alive(&self) {
        let mut shortest_ms = u64::MAX;
        loop {
            let configured_ms = self.inner.state.snapshot().config.hub.keepalive_secs * 1_000;
            tokio::time::sleep(sweep_every(configured_ms.min(shortest_ms))).await;
            let now = self.now_ms();
            let reg = self.registry();
            shortest_ms = u64::MAX;
            for sub in reg.subscribers.values() {
                shortest_ms = shortest_ms.min(sub.feed.keepalive_ms());
                if sub.feed.keepalive_due(now) {
                    sub.feed.kick.notify_one();
                }
            }
        }
    }
}

/// How often the sweep runs for a keepalive period of `period_ms`.
fn sweep_every(period_ms: u64) -> Duration {
    Duration::from_millis(period_ms / 8).max(MIN_SWEEP)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An eighth of the period, and never busier than ten times a second.
    #[test]
    fn the_sweep_runs_every_eighth_of_a_period() {
        assert_eq!(sweep_every(15_000), Duration::from_millis(1_875));
        assert_eq!(sweep_every(1_000), Duration::from_millis(125));
        assert_eq!(sweep_every(0), MIN_SWEEP);
    }
}
