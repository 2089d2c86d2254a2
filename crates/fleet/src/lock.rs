//! The fill lock: the right to fill one key for the whole cluster (`SET NX PX`, so
//! one node per key asks the upstream), given back by compare-and-delete, and the
//! announcement that wakes the nodes waiting for that fill.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::Notify;

use super::link::{Link, PREFIX, Unavailable};

/// Compare-and-delete of a lease (`scripts/release.lua`).
pub(super) static RELEASE: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(include_str!("scripts/release.lua")));

/// The right to fill a key for the whole fleet (one node per key asks the
/// upstream), and the word that a fill is over.
#[async_trait]
pub trait FillLock: Send + Sync {
    /// Registers interest in another node's fill of `key` (before asking for the
    /// lock, so an announcement in between is not missed).
    fn waiter(&self, key: &str) -> Waiter;

    /// Takes the right to fill `key` for `lease`: `Some` when this node is to ask
    /// the upstream, `None` when another node is asking.
    ///
    /// # Errors
    /// [`Unavailable`] when the fleet cannot be asked.
    async fn try_lock(&self, key: &str, lease: Duration) -> Result<Option<Lease>, Unavailable>;

    /// Gives a lease back (a lease that expired and went to another node is not
    /// touched).
    async fn release(&self, lease: Lease);

    /// Tells the nodes waiting for `key` that this node's fill is over.
    async fn announce(&self, key: &str);
}

/// A fill another node announced.
#[derive(Default)]
struct Filled {
    done: AtomicBool,
    notify: Notify,
}

/// Fills waited for, by key.
type Registry = Arc<Mutex<HashMap<String, Arc<Filled>>>>;

/// The fill lock on Redis, and the fills this node waits for, by key, woken by
/// another node's announcement.
pub struct RedisLock {
    link: Link,
    by_key: Registry,
}

impl RedisLock {
    pub(super) fn new(link: Link) -> RedisLock {
        RedisLock {
            link,
            by_key: Registry::default(),
        }
    }

    /// A fill of `key` was announced.
    pub(super) fn wake(&self, key: &str) {
        let waiters = self.by_key.lock().expect("cluster lock is never poisoned");
        if let Some(filled) = waiters.get(key) {
            filled.done.store(true, Ordering::SeqCst);
            filled.notify.notify_waiters();
        }
    }
}

/// The right to fill one key for the whole cluster; given back by
/// [`FillLock::release`].
#[derive(Debug)]
pub struct Lease {
    key: String,
    token: String,
}

impl Lease {
    /// A single node's lease (nobody else could hold one).
    pub(super) fn own() -> Lease {
        Lease {
            key: String::new(),
            token: String::new(),
        }
    }
}

/// Waits for another node's fill of one key; deregisters when dropped.
pub struct Waiter {
    /// Where it is registered (`None`: a single node's, never woken).
    registry: Option<(Registry, String)>,
    filled: Arc<Filled>,
}

impl Waiter {
    /// A waiter nobody wakes (a single node has nobody to wait for).
    pub(super) fn unregistered() -> Waiter {
        Waiter {
            registry: None,
            filled: Arc::default(),
        }
    }

    /// Forgets an announcement already seen, to wait for the next one.
    pub fn rearm(&self) {
        self.filled.done.store(false, Ordering::SeqCst);
    }

    /// Waits up to `limit` for the fill; true when it was announced.
    pub async fn wait(&self, limit: Duration) -> bool {
        let notified = self.filled.notify.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if self.filled.done.load(Ordering::SeqCst) {
            return true;
        }
        tokio::time::timeout(limit, notified).await.is_ok()
            || self.filled.done.load(Ordering::SeqCst)
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        let Some((registry, key)) = &self.registry else {
            return;
        };
        let mut waiters = registry.lock().expect("cluster lock is never poisoned");
        // The map's copy and this one: no other waiter on this node.
        if Arc::strong_count(&self.filled) <= 2 {
            waiters.remove(key);
        }
    }
}

#[async_trait]
impl FillLock for RedisLock {
    fn waiter(&self, key: &str) -> Waiter {
        let registry = Arc::clone(&self.by_key);
        let filled = Arc::clone(
            registry
                .lock()
                .expect("cluster lock is never poisoned")
                .entry(key.to_owned())
                .or_default(),
        );
        Waiter {
            registry: Some((registry, key.to_owned())),
            filled,
        }
    }

    async fn try_lock(&self, key: &str, lease: Duration) -> Result<Option<Lease>, Unavailable> {
        let lock = Lease {
            key: format!("{PREFIX}:lock:{key}"),
            token: format!("{}:{:016x}", self.link.node_id(), fastrand::u64(..)),
        };
        let taken = self
            .link
            .set_if_absent(&lock.key, &lock.token, lease.as_millis() as u64)
            .await?;
        Ok(taken.then_some(lock))
    }

    async fn release(&self, lease: Lease) {
        let _ = self
            .link
            .run(|mut c| async move {
                RELEASE
                    .key(&lease.key)
                    .arg(&lease.token)
                    .invoke_async::<i64>(&mut c)
                    .await
            })
            .await;
    }

    async fn announce(&self, key: &str) {
        let _ = self.link.publish(format!("filled {key}")).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::link::mock;
    use redis::Value;
    use redis_test::MockCmd;

    /// The lease is taken with `SET NX PX` under a token of this node, given back by
    /// the release script with that same token; another node's lease is `None`.
    #[tokio::test]
    async fn a_lease_is_taken_once_and_given_back_with_its_token() {
        fastrand::seed(7);
        let token = format!("n1:{:016x}", fastrand::u64(..));
        let key = "mdproxy:v1:lock:/k";
        let set = |t: &str| {
            redis::cmd("SET")
                .arg(key)
                .arg(t)
                .arg("NX")
                .arg("PX")
                .arg(900)
                .clone()
        };
        let second = {
            fastrand::seed(7);
            fastrand::u64(..);
            format!("n1:{:016x}", fastrand::u64(..))
        };
        let lock = RedisLock::new(Link::on_mock(vec![
            MockCmd::new(set(&token), Ok("OK")),
            MockCmd::new(mock::eval(&RELEASE, &[key], &[&token]), Ok(1)),
            MockCmd::new(set(&second), Ok(Value::Nil)),
        ]));
        fastrand::seed(7);
        let lease = lock
            .try_lock("/k", Duration::from_millis(900))
            .await
            .unwrap()
            .expect("free");
        lock.release(lease).await;
        assert!(
            lock.try_lock("/k", Duration::from_millis(900))
                .await
                .unwrap()
                .is_none(),
            "held by another node"
        );
        assert!(lock.link.is_up(), "every command was the one expected");
    }

    /// An announcement wakes every waiter of the key (registered before it); a
    /// waiter that saw it rearms for the next; dropping the last one deregisters.
    #[tokio::test(start_paused = true)]
    async fn announcements_wake_the_waiters_of_their_key() {
        let lock = RedisLock::new(Link::on_mock(vec![]));
        let (a, b) = (lock.waiter("/k"), lock.waiter("/k"));
        let other = lock.waiter("/other");
        lock.wake("/k");
        assert!(a.wait(Duration::from_secs(1)).await);
        assert!(b.wait(Duration::from_secs(1)).await);
        assert!(!other.wait(Duration::from_secs(1)).await, "times out");
        a.rearm();
        let waiting = tokio::spawn(async move { a.wait(Duration::from_secs(5)).await });
        tokio::task::yield_now().await;
        lock.wake("/k");
        assert!(waiting.await.unwrap());
        drop(b);
        drop(other);
        assert!(lock.by_key.lock().unwrap().is_empty());
    }

    /// Redis away: no lease, the caller fills alone.
    #[tokio::test]
    async fn no_lease_while_redis_is_away() {
        let lock = RedisLock::new(Link::on_mock(vec![mock::failing(
            redis::cmd("SET").arg("mdproxy:v1:lock:/k").arg("x").clone(),
        )]));
        assert_eq!(
            lock.try_lock("/k", Duration::from_millis(1)).await.err(),
            Some(Unavailable)
        );
        assert_eq!(
            lock.try_lock("/k", Duration::from_millis(1)).await.err(),
            Some(Unavailable),
            "marked away: not even asked"
        );
    }
}
