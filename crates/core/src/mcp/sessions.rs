//! Sessions of the 2025 revisions kept for the fleet (rmcp's `SessionStore` over
//! the fleet's agent sessions): a node that gets a request of a session another
//! node opened replays that session's `initialize` and answers it. Redis away
//! makes a session another node opened unknown here, so its client opens a new
//! one, as the protocol says, rather than getting a server error.

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use rmcp::transport::streamable_http_server::session::store::{
    SessionState, SessionStore, SessionStoreError,
};

use mdproxy_fleet::agents::AgentSessions;

/// rmcp's session store on the fleet's agent sessions.
pub struct FleetSessions {
    kept: Arc<dyn AgentSessions>,
}

impl FleetSessions {
    /// The store over `kept`, or none when sessions are not shared (a single
    /// node: rmcp then keeps its sessions in memory alone).
    pub fn over(kept: &Arc<dyn AgentSessions>) -> Option<Arc<dyn SessionStore>> {
        kept.is_shared().then(|| {
            Arc::new(FleetSessions {
                kept: Arc::clone(kept),
            }) as Arc<dyn SessionStore>
        })
    }
}

#[async_trait]
impl SessionStore for FleetSessions {
    async fn load(&self, session_id: &str) -> Result<Option<SessionState>, SessionStoreError> {
        let Ok(Some(kept)) = self.kept.load(session_id).await else {
            return Ok(None);
        };
        match serde_json::from_slice(&kept) {
            Ok(state) => Ok(Some(state)),
            Err(e) => {
                tracing::warn!(error = %e, "an agent session kept for the fleet does not read; it is unknown here");
                Ok(None)
            }
        }
    }

    async fn store(&self, session_id: &str, state: &SessionState) -> Result<(), SessionStoreError> {
        let state = Bytes::from(serde_json::to_vec(state)?);
        self.kept
            .keep(session_id, state)
            .await
            .map_err(|_| "Redis is away: the session lives on this node alone".into())
    }

    async fn delete(&self, session_id: &str) -> Result<(), SessionStoreError> {
        self.kept
            .forget(session_id)
            .await
            .map_err(|_| "Redis is away: the session stays kept until it expires".into())
    }
}
