//! Whether the agent of a session is still there: when it last sent a request of
//! the session and how many of the session's response streams it holds open. A
//! watch asks before each notification, so the watches of an agent that went away
//! without closing its session end: rmcp counts every notification as the
//! session's activity, and would otherwise keep it (and its hub streams) for ever.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;

/// The sessions seen here, by ID.
#[derive(Debug)]
pub struct Presence {
    by_id: Mutex<HashMap<String, Seen>>,
    /// How long an agent with no request and no open stream is still there.
    away: Duration,
}

/// What is known of one session's agent.
#[derive(Debug)]
struct Seen {
    /// Its last request, or the end of its last response stream.
    last: Instant,
    /// Its response streams open now (a `GET` stream, a request's SSE answer).
    open: usize,
}

/// An open response stream of a session: its agent is there while it is held.
#[derive(Debug)]
pub struct Streaming {
    presence: Arc<Presence>,
    id: String,
}

impl Presence {
    /// Agents are away after `away` with no request and no stream open (the
    /// session's idle time: rmcp closes a session idle that long).
    pub fn new(away: Duration) -> Arc<Presence> {
        Arc::new(Presence {
            by_id: Mutex::default(),
            away,
        })
    }

    fn by_id(&self) -> MutexGuard<'_, HashMap<String, Seen>> {
        self.by_id.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A request of session `id` now.
    pub fn seen(&self, id: &str) {
        let now = Instant::now();
        self.by_id()
            .entry(id.to_owned())
            .and_modify(|s| s.last = now)
            .or_insert(Seen { last: now, open: 0 });
    }

    /// A response stream of session `id` opened now, open until the guard drops.
    pub fn streaming(self: &Arc<Self>, id: &str) -> Streaming {
        self.seen(id);
        if let Some(seen) = self.by_id().get_mut(id) {
            seen.open += 1;
        }
        Streaming {
            presence: Arc::clone(self),
            id: id.to_owned(),
        }
    }

    /// Whether the agent of session `id` is still there at `now`: a stream of its
    /// own open, or a request (or a stream's end) within the away time. A session
    /// never seen, or forgotten, has no agent here.
    pub fn present(&self, id: &str, now: Instant) -> bool {
        self.by_id()
            .get(id)
            .is_some_and(|s| s.open > 0 || now.duration_since(s.last) < self.away)
    }

    /// Forgets the sessions that `live` says are closed.
    pub fn forget_closed(&self, live: impl Fn(&str) -> bool) {
        self.by_id().retain(|id, _| live(id));
    }
}

impl Drop for Streaming {
    fn drop(&mut self) {
        let now = Instant::now();
        if let Some(seen) = self.presence.by_id().get_mut(&self.id) {
            seen.open = seen.open.saturating_sub(1);
            seen.last = now;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const AWAY: Duration = Duration::from_secs(300);

    /// An agent is there while it asks or holds a stream, and away once it has
    /// done neither for the away time; a session never seen has no agent.
    #[tokio::test(start_paused = true)]
    async fn an_agent_is_away_after_the_idle_time_without_a_request_or_stream() {
        let presence = Presence::new(AWAY);
        assert!(!presence.present("s", Instant::now()), "never seen");
        presence.seen("s");
        tokio::time::advance(AWAY - Duration::from_secs(1)).await;
        assert!(presence.present("s", Instant::now()));
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(
            !presence.present("s", Instant::now()),
            "no request for AWAY"
        );

        // A stream held keeps it there however long; its end starts the clock.
        let stream = presence.streaming("s");
        let second = presence.streaming("s");
        tokio::time::advance(AWAY * 10).await;
        assert!(presence.present("s", Instant::now()));
        drop(second);
        tokio::time::advance(AWAY * 10).await;
        assert!(
            presence.present("s", Instant::now()),
            "one stream still open"
        );
        drop(stream);
        tokio::time::advance(AWAY - Duration::from_secs(1)).await;
        assert!(presence.present("s", Instant::now()));
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(!presence.present("s", Instant::now()));

        presence.seen("s");
        presence.forget_closed(|id| id != "s");
        assert!(!presence.present("s", Instant::now()), "closed: forgotten");
        // A stream ending after its session was forgotten changes nothing.
        let late = presence.streaming("t");
        presence.forget_closed(|_| false);
        drop(late);
        assert!(!presence.present("t", Instant::now()));
    }
}
