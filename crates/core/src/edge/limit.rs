//! Per-token client rate limits (governor, on the injectable clock). A reload keeps
//! the bucket of every client whose token and limits did not change, so a client
//! past its limit gets no fresh quota from an unrelated config change.

use std::sync::Arc;
use std::time::Duration;

use crate::upstream::budget::{Limiter, RateClock, check, limiter};
use mdproxy_config::{ClientConfig, LimitsConfig, Secret};

/// One client's limit and what it was built from.
struct Slot {
    token: Secret,
    rps: u32,
    burst: u32,
    limiter: Option<Arc<Limiter>>,
}

/// The client limits, indexed like the configured tokens (`TokenId`).
pub struct ClientLimits {
    slots: Vec<Slot>,
    clock: RateClock,
}

impl ClientLimits {
    /// One limiter per client (`None` where unlimited), reusing the limiter of
    /// `previous` for every client whose token, rate and burst are unchanged.
    pub fn new(
        clients: &[ClientConfig],
        limits: &LimitsConfig,
        clock: &RateClock,
        previous: Option<&ClientLimits>,
    ) -> ClientLimits {
        let slots = clients
            .iter()
            .map(|c| {
                let rps = c.rps.unwrap_or(limits.client_rps);
                let burst = c.burst.unwrap_or(limits.client_burst);
                let kept = previous.and_then(|p| {
                    p.slots
                        .iter()
                        .find(|s| s.rps == rps && s.burst == burst && s.token == c.token)
                });
                Slot {
                    token: c.token.clone(),
                    rps,
                    burst,
                    limiter: match kept {
                        Some(slot) => slot.limiter.clone(),
                        None => limiter(rps, burst, clock).map(Arc::new),
                    },
                }
            })
            .collect();
        ClientLimits {
            slots,
            clock: clock.clone(),
        }
    }

    /// Takes one request from client `index`'s allowance.
    ///
    /// # Errors
    /// The whole seconds to wait before the next request is allowed (at least 1).
    pub fn check(&self, index: usize) -> Result<(), u64> {
        match self.slots.get(index).and_then(|s| s.limiter.as_deref()) {
            None => Ok(()),
            Some(l) => check(l, &self.clock).map_err(|wait| whole_secs(wait).max(1)),
        }
    }
}

/// `wait` rounded up to whole seconds (`Retry-After`).
fn whole_secs(wait: Duration) -> u64 {
    wait.as_secs() + u64::from(wait.subsec_nanos() > 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use governor::clock::FakeRelativeClock;

    fn client(token: &str, rps: u32, burst: u32) -> ClientConfig {
        ClientConfig {
            name: token.into(),
            token: Secret::new(token),
            rps: Some(rps),
            burst: Some(burst),
        }
    }

    #[test]
    fn client_limits_give_retry_after_on_the_fake_clock() {
        let fake = FakeRelativeClock::default();
        let clock = RateClock::Fake(fake.clone());
        let l = ClientLimits::new(&[client("a", 1, 2)], &LimitsConfig::default(), &clock, None);
        assert!(l.check(0).is_ok());
        assert!(l.check(0).is_ok());
        assert_eq!(l.check(0), Err(1));
        fake.advance(Duration::from_secs(1));
        assert!(l.check(0).is_ok(), "one permit back after a second");
        assert!(l.check(7).is_ok(), "unknown index: unlimited");
    }

    /// Defect: a reload refilled every client's bucket. A client past its limit
    /// stays limited across a rebuild that kept its settings, while a client whose
    /// limit changed gets a new bucket.
    #[test]
    fn a_rebuild_keeps_the_buckets_of_unchanged_clients() {
        let clock = RateClock::Fake(FakeRelativeClock::default());
        let limits = LimitsConfig::default();
        let before = ClientLimits::new(
            &[client("a", 1, 1), client("b", 1, 1)],
            &limits,
            &clock,
            None,
        );
        assert!(before.check(0).is_ok());
        assert!(before.check(1).is_ok());
        assert!(before.check(0).is_err());
        // Reordered, and b's limit changed.
        let after = ClientLimits::new(
            &[client("b", 5, 5), client("a", 1, 1)],
            &limits,
            &clock,
            Some(&before),
        );
        assert_eq!(after.check(1), Err(1), "a is still past its limit");
        assert!(after.check(0).is_ok(), "b has a new bucket");
    }
}
