//! One run of each scheduled job for the fleet: every node's scheduler fires, and
//! the first to claim the second it fired in runs it (`SET NX`, kept a minute).

use async_trait::async_trait;

use super::link::{Link, PREFIX, Unavailable};

/// One run of each scheduled job for the fleet.
#[async_trait]
pub trait JobClaims: Send + Sync {
    /// Claims the run of `job` that fired in `slot` (its second): `true` for the
    /// first node that asks, `false` for the others.
    ///
    /// # Errors
    /// [`Unavailable`] when the fleet cannot be asked (the node then runs it).
    async fn claim(&self, job: &str, slot: i64) -> Result<bool, Unavailable>;
}

/// Job claims on Redis.
pub struct RedisJobs {
    link: Link,
}

impl RedisJobs {
    pub(super) fn new(link: Link) -> RedisJobs {
        RedisJobs { link }
    }
}

/// How long a claim is kept: far longer than any clock skew between the nodes'
/// firings of one second.
const CLAIM_KEPT_MS: u64 = 60_000;

#[async_trait]
impl JobClaims for RedisJobs {
    async fn claim(&self, job: &str, slot: i64) -> Result<bool, Unavailable> {
        let key = format!("{PREFIX}:job:{job}:{slot}");
        self.link
            .set_if_absent(&key, self.link.instance(), CLAIM_KEPT_MS)
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::link::mock;
    use redis::Value;
    use redis_test::MockCmd;

    fn claim(slot: i64) -> redis::Cmd {
        redis::cmd("SET")
            .arg(format!("mdproxy:v1:job:warm:{slot}"))
            .arg("n1")
            .arg("NX")
            .arg("PX")
            .arg(CLAIM_KEPT_MS)
            .clone()
    }

    /// The first claim of a firing wins, a second one loses; Redis away leaves the
    /// choice to the node (it runs the job).
    #[tokio::test]
    async fn a_firing_is_claimed_once() {
        let jobs = RedisJobs::new(Link::on_mock(vec![
            MockCmd::new(claim(60), Ok("OK")),
            MockCmd::new(claim(60), Ok(Value::Nil)),
            mock::failing(claim(120)),
        ]));
        assert_eq!(jobs.claim("warm", 60).await, Ok(true));
        assert_eq!(jobs.claim("warm", 60).await, Ok(false));
        assert_eq!(jobs.claim("warm", 120).await, Err(Unavailable));
    }
}
