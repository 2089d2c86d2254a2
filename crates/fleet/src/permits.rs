//! The fleet's upstream budget: GCRA on Redis's clock (one clock for every node),
//! one bucket per upstream instance. The priorities (who waits, who is dropped)
//! stay with the budget that asks.

use std::sync::LazyLock;
use std::time::Duration;

use async_trait::async_trait;

use super::link::{Link, PREFIX, Unavailable};

/// The fleet's upstream budget.
#[async_trait]
pub trait Permits: Send + Sync {
    /// Nodes alive (this one included); a node alone takes this share of a budget.
    fn nodes(&self) -> u64;

    /// Whether permits come from a bucket the fleet shares (on Redis): a single
    /// node's never do, so its budget decides at once, with no future to wait on.
    fn is_shared(&self) -> bool;

    /// The part of a budget the fleet's bucket gives out: the nodes alive over the
    /// nodes expected (`cluster.expected_nodes`), at most the whole. A node that is
    /// missing may be cut off from Redis and working on its own share (a partial
    /// partition), so the nodes that still reach Redis leave that share to it and
    /// the whole stays within the budget.
    fn fleet_share(&self) -> f64 {
        1.0
    }

    /// One permit from the fleet's bucket `bucket`: `interval` between permits,
    /// `tolerance` how far ahead of that schedule one may be taken (the burst).
    /// Zero when granted, else how long until one may be.
    ///
    /// # Errors
    /// [`Unavailable`] when the fleet cannot be asked (the node uses its own).
    async fn take_permit(
        &self,
        bucket: &str,
        interval: Duration,
        tolerance: Duration,
    ) -> Result<Duration, Unavailable>;
}

/// The budget on Redis.
pub struct RedisPermits {
    link: Link,
}

impl RedisPermits {
    pub(super) fn new(link: Link) -> RedisPermits {
        RedisPermits { link }
    }
}

/// `alive` nodes' part of a budget meant for `expected` (see
/// [`Permits::fleet_share`]).
fn share(alive: u64, expected: u64) -> f64 {
    if alive >= expected {
        1.0
    } else {
        alive as f64 / expected as f64
    }
}

/// One permit, or the wait for one (`scripts/gcra.lua`).
static GCRA: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(include_str!("scripts/gcra.lua")));

/// The Redis key of `bucket`'s schedule. The primary keeps the name it had before
/// buckets were per instance, so nodes of both versions share one budget during a
/// rolling upgrade.
fn bucket_key(bucket: &str) -> String {
    if bucket == "primary" {
        format!("{PREFIX}:budget")
    } else {
        format!("{PREFIX}:budget:{bucket}")
    }
}

#[async_trait]
impl Permits for RedisPermits {
    fn nodes(&self) -> u64 {
        self.link.nodes()
    }

    fn is_shared(&self) -> bool {
        true
    }

    fn fleet_share(&self) -> f64 {
        share(self.link.nodes(), self.link.expected())
    }

    async fn take_permit(
        &self,
        bucket: &str,
        interval: Duration,
        tolerance: Duration,
    ) -> Result<Duration, Unavailable> {
        let key = bucket_key(bucket);
        let (interval, tolerance) = (interval.as_micros() as u64, tolerance.as_micros() as u64);
        let wait: u64 = self
            .link
            .run(|mut c| async move {
                GCRA.key(&key)
                    .arg(interval)
                    .arg(tolerance)
                    .invoke_async(&mut c)
                    .await
            })
            .await?;
        Ok(Duration::from_micros(wait))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::link::mock;
    use redis_test::MockCmd;

    /// The fleet's bucket gives out the nodes alive over the nodes expected: before
    /// the first heartbeat (the expected count) and with as many or more alive, the
    /// whole; with fewer, their part.
    #[tokio::test]
    async fn the_nodes_on_redis_leave_the_missing_ones_their_share() {
        let beat = |n: i64| {
            MockCmd::new(
                mock::eval(
                    &crate::link::HEARTBEAT,
                    &["mdproxy:v1:nodes"],
                    &["n1", "5000"],
                ),
                Ok(n),
            )
        };
        let link = Link::on_mock(vec![beat(2), beat(4)]);
        link.expect_nodes(3);
        let permits = RedisPermits::new(link.clone());
        assert_eq!(permits.fleet_share(), 1.0, "before the first heartbeat");
        link.beat().await;
        assert!((permits.fleet_share() - 2.0 / 3.0).abs() < 1e-9);
        link.beat().await;
        assert_eq!(permits.fleet_share(), 1.0, "more than expected");
        assert_eq!(share(1, 1), 1.0, "the default: nothing held back");
    }

    /// The interval and tolerance go in microseconds, each instance to its own
    /// bucket (the primary's under its old name); the answer is the wait.
    #[tokio::test]
    async fn a_permit_is_asked_in_microseconds_per_bucket() {
        let permits = RedisPermits::new(Link::on_mock(vec![
            MockCmd::new(
                mock::eval(&GCRA, &["mdproxy:v1:budget"], &["250000", "750000"]),
                Ok(0),
            ),
            MockCmd::new(
                mock::eval(&GCRA, &["mdproxy:v1:budget:fallback-1"], &["1000000", "0"]),
                Ok(1_500),
            ),
        ]));
        let quarter = Duration::from_millis(250);
        assert_eq!(
            permits.take_permit("primary", quarter, quarter * 3).await,
            Ok(Duration::ZERO)
        );
        assert_eq!(
            permits
                .take_permit("fallback-1", Duration::from_secs(1), Duration::ZERO)
                .await,
            Ok(Duration::from_micros(1_500))
        );
    }

    /// A script that is not loaded yet is loaded once and run again (a Redis that
    /// restarted forgets its scripts).
    #[tokio::test]
    async fn a_forgotten_script_is_loaded_again() {
        let ask = || mock::eval(&GCRA, &["mdproxy:v1:budget"], &["1", "0"]);
        let permits = RedisPermits::new(Link::on_mock(vec![
            MockCmd::new::<_, i64>(
                ask(),
                Err(redis::RedisError::from((
                    redis::ErrorKind::NoScriptError,
                    "NOSCRIPT",
                ))),
            ),
            MockCmd::new(
                redis::cmd("SCRIPT")
                    .arg("LOAD")
                    .arg(include_str!("scripts/gcra.lua"))
                    .clone(),
                Ok(GCRA.get_hash()),
            ),
            MockCmd::new(ask(), Ok(0)),
        ]));
        assert_eq!(
            permits
                .take_permit("primary", Duration::from_micros(1), Duration::ZERO)
                .await,
            Ok(Duration::ZERO)
        );
    }
}
