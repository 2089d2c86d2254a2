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
