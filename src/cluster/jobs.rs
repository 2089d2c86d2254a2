//! One run of each scheduled job for the fleet: every node's scheduler fires, and
//! the first to claim the second it fired in runs it (`SET NX`, kept a minute).

use async_trait::async_trait;

use super::{Cluster, JobClaims, PREFIX, Unavailable};

/// How long a claim is kept: far longer than any clock skew between the nodes'
/// firings of one second.
const CLAIM_KEPT_MS: u64 = 60_000;

#[async_trait]
impl JobClaims for Cluster {
    async fn claim(&self, job: &str, slot: i64) -> Result<bool, Unavailable> {
        let key = format!("{PREFIX}:job:{job}:{slot}");
        self.set_if_absent(&key, &self.inner.node_id, CLAIM_KEPT_MS)
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::mock;
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
        let cluster = Cluster::on_mock(vec![
            MockCmd::new(claim(60), Ok("OK")),
            MockCmd::new(claim(60), Ok(Value::Nil)),
            mock::failing(claim(120)),
        ]);
        assert_eq!(cluster.claim("warm", 60).await, Ok(true));
        assert_eq!(cluster.claim("warm", 60).await, Ok(false));
        assert_eq!(cluster.claim("warm", 120).await, Err(Unavailable));
    }
}
