//! What the proxy last heard from the upstream (any request: client fills,
//! refreshes, prewarm, the hub's polls, the start-up probe), and the readiness it
//! decides: a node is ready once the upstream has answered, or once its cache can
//! answer by itself.

use std::fmt;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::SystemTime;

use chrono::{DateTime, Utc};

/// The last success and the last failure heard from the upstream.
#[derive(Clone, Debug, Default)]
pub struct Heard {
    /// When an upstream request last succeeded (the upstream answered and took our token).
    pub last_ok: Option<DateTime<Utc>>,
    /// The last failure: when, and what (an outcome label and a sentence).
    pub last_error: Option<(DateTime<Utc>, &'static str, String)>,
}

/// The upstream's health as this node heard it.
#[derive(Debug, Default)]
pub struct Health {
    /// When an upstream request last succeeded, in milliseconds since the epoch;
    /// 0 before any did (readiness waits for one, or for warm entries). An atomic:
    /// every answered request sets it, on whichever worker.
    last_ok_ms: AtomicI64,
    last_error: Mutex<Option<(DateTime<Utc>, &'static str, String)>>,
}

/// Why a node is ready for traffic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ready {
    /// An upstream request succeeded.
    UpstreamAnswered,
    /// The cache holds entries it can answer from whatever the upstream does.
    CacheWarm { entries: u64 },
}

impl fmt::Display for Ready {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ready::UpstreamAnswered => f.write_str("the upstream answered"),
            Ready::CacheWarm { entries } => write!(
                f,
                "the cache holds {entries} entries (the upstream has not answered yet)"
            ),
        }
    }
}

/// Why a node is not ready: nothing succeeded yet, and the last failure if any.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotReady {
    /// The last failure's outcome label and what happened.
    pub last_error: Option<(&'static str, String)>,
}

impl fmt::Display for NotReady {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.last_error {
            Some((label, detail)) => write!(
                f,
                "no upstream request has succeeded yet; the last one failed ({label}): {detail}"
            ),
            None => f.write_str("no upstream request has succeeded yet and the cache is empty"),
        }
    }
}

impl Health {
    /// Records a request the upstream answered: a success (`error` `None`) or a
    /// failure (its outcome label and what happened).
    pub fn answered(&self, error: Option<(&'static str, String)>) {
        match error {
            None => {
                let ms = SystemTime::now()
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .map_or(1, |since| {
                        i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
                    });
                self.last_ok_ms.store(ms.max(1), Ordering::Relaxed);
            }
            Some((label, detail)) => self.failed(label, detail),
        }
    }

    /// Records a request that got no answer (timeout, unreachable).
    pub fn unanswered(&self, label: &'static str, detail: String) {
        self.failed(label, detail);
    }

    fn failed(&self, label: &'static str, detail: String) {
        *self
            .last_error
            .lock()
            .expect("health lock is never poisoned") = Some((Utc::now(), label, detail));
    }

    /// What the proxy last heard.
    pub fn heard(&self) -> Heard {
        let last_ok = match self.last_ok_ms.load(Ordering::Relaxed) {
            0 => None,
            ms => DateTime::from_timestamp_millis(ms),
        };
        Heard {
            last_ok,
            last_error: self
                .last_error
                .lock()
                .expect("health lock is never poisoned")
                .clone(),
        }
    }

    /// Whether an upstream request ever succeeded.
    pub fn is_seen(&self) -> bool {
        self.last_ok_ms.load(Ordering::Relaxed) != 0
    }

    /// Whether the node is ready for traffic, with its cache holding `entries`:
    /// once an upstream request has succeeded (the upstream is there and takes our
    /// token) or the cache holds entries. Until then `/readyz` answers 503 with the
    /// reason, so a rollout does not send traffic to a node that can only answer
    /// errors.
    ///
    /// # Errors
    /// Why it is not ready, with the upstream's last failure when there is one.
    pub fn readiness(&self, entries: u64) -> Result<Ready, NotReady> {
        if self.is_seen() {
            return Ok(Ready::UpstreamAnswered);
        }
        if entries > 0 {
            return Ok(Ready::CacheWarm { entries });
        }
        Err(NotReady {
            last_error: self
                .heard()
                .last_error
                .map(|(_, label, detail)| (label, detail)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Not ready until the upstream answers or the cache is warm; the reason names
    /// the last failure.
    #[test]
    fn readiness_waits_for_an_answer_or_a_warm_cache() {
        let health = Health::default();
        let not = health.readiness(0).unwrap_err();
        assert_eq!(not.last_error, None);
        health.unanswered("timeout", "no answer in 2 s".into());
        let not = health.readiness(0).unwrap_err();
        assert!(
            not.to_string().contains("(timeout): no answer in 2 s"),
            "{not}"
        );
        assert_eq!(health.readiness(3), Ok(Ready::CacheWarm { entries: 3 }));
        health.answered(Some(("failed", "a 500".into())));
        assert!(
            health.readiness(0).is_err(),
            "a failure is not an answer that counts"
        );
        health.answered(None);
        assert_eq!(health.readiness(0), Ok(Ready::UpstreamAnswered));
        assert!(health.heard().last_ok.is_some());
    }
}
