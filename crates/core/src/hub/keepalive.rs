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
    async fn keep_alive(&self) {
        loop {
            let period = self.inner.state.snapshot().config.hub.keepalive_secs;
            tokio::time::sleep(sweep_every(period)).await;
            let now = self.now_ms();
            let reg = self.registry();
            for sub in reg.subscribers.values() {
                if sub.feed.keepalive_due(now) {
                    sub.feed.kick.notify_one();
                }
            }
        }
    }
}

/// How often the sweep runs for a keepalive of `keepalive_secs`.
fn sweep_every(keepalive_secs: u64) -> Duration {
    Duration::from_millis(keepalive_secs * 1_000 / 8).max(MIN_SWEEP)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An eighth of the period, and never busier than ten times a second.
    #[test]
    fn the_sweep_runs_every_eighth_of_a_period() {
        assert_eq!(sweep_every(15), Duration::from_millis(1_875));
        assert_eq!(sweep_every(1), Duration::from_millis(125));
        assert_eq!(sweep_every(0), MIN_SWEEP);
    }
}
