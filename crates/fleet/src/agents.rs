//! AI agents' sessions kept for the fleet, so that any node answers a request of a
//! session another node opened: what a session is made of (the MCP `initialize`
//! it began with) is the caller's bytes; this part keeps them by session ID for a
//! day (`SET PX`), with a digest of who opened each, gives them back and forgets
//! them.

use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;

use super::link::{Link, PREFIX, Unavailable};

/// How long a session is kept for the fleet after it began: far past any agent's
/// working day; a session older than this that reaches a node which never saw it
/// is unknown there, and the client opens a new one (as the protocol says).
pub const SESSION_KEPT: Duration = Duration::from_secs(24 * 3600);

/// Agents' sessions, by ID, for the fleet.
#[async_trait]
pub trait AgentSessions: Send + Sync {
    /// Whether sessions are kept for the fleet (false alone: each node holds its own).
    fn is_shared(&self) -> bool;

    /// The session `id` as [`keep`](Self::keep) was given it, if it is kept.
    ///
    /// # Errors
    /// [`Unavailable`] when the fleet cannot be asked.
    async fn load(&self, id: &str) -> Result<Option<Bytes>, Unavailable>;

    /// Keeps `state` as the session `id` for [`SESSION_KEPT`].
    ///
    /// # Errors
    /// [`Unavailable`] when the fleet cannot be told.
    async fn keep(&self, id: &str, state: Bytes) -> Result<(), Unavailable>;

    /// Forgets the session `id` (its client closed it), and who opened it.
    ///
    /// # Errors
    /// [`Unavailable`] when the fleet cannot be told.
    async fn forget(&self, id: &str) -> Result<(), Unavailable>;

    /// Who opened the session `id`, as [`keep_owner`](Self::keep_owner) was given
    /// it (a digest the caller makes: never a key itself).
    ///
    /// # Errors
    /// [`Unavailable`] when the fleet cannot be asked.
    async fn owner(&self, id: &str) -> Result<Option<Bytes>, Unavailable>;

    /// Keeps `digest` as who opened the session `id`, for [`SESSION_KEPT`].
    ///
    /// # Errors
    /// [`Unavailable`] when the fleet cannot be told.
    async fn keep_owner(&self, id: &str, digest: Bytes) -> Result<(), Unavailable>;
}

/// Agents' sessions on Redis.
pub struct RedisAgentSessions {
    link: Link,
}

impl RedisAgentSessions {
    pub(super) fn new(link: Link) -> RedisAgentSessions {
        RedisAgentSessions { link }
    }
}

fn key(id: &str) -> String {
    format!("{PREFIX}:agent-session:{id}")
}

fn owner_key(id: &str) -> String {
    format!("{PREFIX}:agent-session-owner:{id}")
}

impl RedisAgentSessions {
    async fn get(&self, key: String) -> Result<Option<Bytes>, Unavailable> {
        let found: Option<Vec<u8>> = self
            .link
            .run(|mut c| async move { redis::cmd("GET").arg(&key).query_async(&mut c).await })
            .await?;
        Ok(found.map(Bytes::from))
    }

    async fn set(&self, key: String, value: Bytes) -> Result<(), Unavailable> {
        self.link
            .run(|mut c| async move {
                redis::cmd("SET")
                    .arg(&key)
                    .arg(value.as_ref())
                    .arg("PX")
                    .arg(SESSION_KEPT.as_millis() as u64)
                    .query_async::<()>(&mut c)
                    .await
            })
            .await
    }
}

#[async_trait]
impl AgentSessions for RedisAgentSessions {
    fn is_shared(&self) -> bool {
        true
    }

    async fn load(&self, id: &str) -> Result<Option<Bytes>, Unavailable> {
        self.get(key(id)).await
    }

    async fn keep(&self, id: &str, state: Bytes) -> Result<(), Unavailable> {
        self.set(key(id), state).await
    }

    async fn forget(&self, id: &str) -> Result<(), Unavailable> {
        // One key a command: on a Redis Cluster the two are in different slots.
        let (session, owner) = (key(id), owner_key(id));
        self.link
            .run(|mut c| async move {
                redis::cmd("DEL")
                    .arg(&session)
                    .query_async::<()>(&mut c)
                    .await?;
                redis::cmd("DEL")
                    .arg(&owner)
                    .query_async::<()>(&mut c)
                    .await
            })
            .await
    }

    async fn owner(&self, id: &str) -> Result<Option<Bytes>, Unavailable> {
        self.get(owner_key(id)).await
    }

    async fn keep_owner(&self, id: &str, digest: Bytes) -> Result<(), Unavailable> {
        self.set(owner_key(id), digest).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::link::mock;
    use redis::Value;
    use redis_test::MockCmd;

    /// A session kept is given back as it was kept (its owner too) and forgotten,
    /// with its owner, when closed; an
    /// unknown one is none, and Redis away is said, not taken for "unknown".
    #[tokio::test]
    async fn a_session_is_kept_given_back_and_forgotten() {
        let k = "mdproxy:v1:agent-session:s1";
        let o = "mdproxy:v1:agent-session-owner:s1";
        let set = redis::cmd("SET")
            .arg(k)
            .arg(&b"{\"init\":1}"[..])
            .arg("PX")
            .arg(86_400_000u64)
            .clone();
        let sessions = RedisAgentSessions::new(Link::on_mock(vec![
            MockCmd::new(set, Ok("OK")),
            MockCmd::new(
                redis::cmd("GET").arg(k).clone(),
                Ok(Value::BulkString(b"{\"init\":1}".to_vec())),
            ),
            MockCmd::new(
                redis::cmd("SET")
                    .arg(o)
                    .arg(&b"digest"[..])
                    .arg("PX")
                    .arg(86_400_000u64)
                    .clone(),
                Ok("OK"),
            ),
            MockCmd::new(
                redis::cmd("GET").arg(o).clone(),
                Ok(Value::BulkString(b"digest".to_vec())),
            ),
            MockCmd::new(redis::cmd("DEL").arg(k).clone(), Ok(1)),
            MockCmd::new(redis::cmd("DEL").arg(o).clone(), Ok(1)),
            MockCmd::new(redis::cmd("GET").arg(k).clone(), Ok(Value::Nil)),
            mock::failing(redis::cmd("GET").arg(k).clone()),
        ]));
        let state = Bytes::from_static(b"{\"init\":1}");
        assert_eq!(sessions.keep("s1", state.clone()).await, Ok(()));
        assert_eq!(sessions.load("s1").await, Ok(Some(state)));
        let digest = Bytes::from_static(b"digest");
        assert_eq!(sessions.keep_owner("s1", digest.clone()).await, Ok(()));
        assert_eq!(sessions.owner("s1").await, Ok(Some(digest)));
        assert_eq!(sessions.forget("s1").await, Ok(()));
        assert_eq!(sessions.load("s1").await, Ok(None));
        assert_eq!(sessions.load("s1").await, Err(Unavailable));
    }
}
