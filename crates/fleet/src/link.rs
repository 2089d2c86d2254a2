//! One node's link to Redis, which every shared part runs its commands on: the data
//! connection of the current session, up or away (every command bounded by the
//! timeout; a failure marks Redis away once), the heartbeat that counts the living
//! nodes, and the time spent alone. The key prefix and the events channel are named
//! here; what travels on them is each part's business.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::conn::{Connection, Scan};

/// Prefix of every key and channel, versioned with the entry format.
pub(super) const PREFIX: &str = "mdproxy:v1";
/// How often a node says it is alive (the node count divides the budget when
/// Redis is away).
const HEARTBEAT_EVERY: Duration = Duration::from_secs(1);
/// A node silent for this long no longer counts.
const NODE_EXPIRES: Duration = Duration::from_secs(5);
/// How often Redis's refusals of commands (`NOPERM`) are logged at most.
const REFUSALS_LOGGED_EVERY: Duration = Duration::from_secs(60);

/// Keys `SCAN` looks at per round (a purge, the pauses kept).
pub(super) const SCAN_COUNT: usize = 500;

/// Marks a node alive and counts the living (`scripts/heartbeat.lua`).
pub(crate) static HEARTBEAT: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(include_str!("scripts/heartbeat.lua")));

/// Why a cluster operation did not happen; the caller carries on alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unavailable;

/// The channel of fills, purges and the upstream's pushback.
pub(super) fn events_channel() -> String {
    format!("{PREFIX}:events")
}

/// The sorted set of living nodes (scored by their last heartbeat).
pub(super) fn nodes_key() -> String {
    format!("{PREFIX}:nodes")
}

/// The link. Cheap to clone; every clone is the same link.
#[derive(Clone)]
pub(super) struct Link {
    inner: Arc<Inner>,
}

struct Inner {
    node_id: String,
    /// This process in the fleet: its node ID and a number drawn at start, so that
    /// two processes given one `cluster.node_id` (a copied configuration) are two
    /// nodes, not one that both lead and count once.
    instance: String,
    /// Redis is a Redis Cluster: keys read together share a hash tag.
    sharded: bool,
    /// The session's events travel on sharded pub/sub (`SPUBLISH`).
    sharded_pubsub: AtomicBool,
    /// The data connection of the current session (None until Redis first answers).
    conn: Mutex<Option<Connection>>,
    up: AtomicBool,
    /// `host:port` of the Redis of the last session (empty before the first).
    address: Mutex<String>,
    /// Sessions that found the master at another address than the one before.
    failovers: AtomicU64,
    /// Attempts to connect, and sessions, that ended in an error.
    failed_sessions: AtomicU64,
    /// Time this node has spent without Redis.
    alone: Mutex<AloneTime>,
    timeout: Duration,
    /// Nodes seen alive at the last heartbeat (at least 1).
    nodes: AtomicU64,
    /// The nodes the fleet is expected to have (`cluster.expected_nodes`).
    expected: AtomicU64,
    /// Commands Redis refused to this node's ACL user (`NOPERM`).
    refused: AtomicU64,
    /// When a refusal was last logged.
    refusal_logged: Mutex<Option<Instant>>,
}

/// Time spent alone: the periods ended, and the start of the one under way.
struct AloneTime {
    ended: Duration,
    since: Option<Instant>,
}

impl AloneTime {
    fn total(&self) -> Duration {
        self.ended + self.since.map_or(Duration::ZERO, |s| s.elapsed())
    }
}

impl Link {
    /// A link with no session yet (away until [`Link::joined`]); `sharded` for a
    /// Redis Cluster.
    pub(super) fn new(node_id: String, timeout: Duration, sharded: bool) -> Link {
        let instance = format!("{node_id}#{:08x}", fastrand::u32(..));
        Link::with_instance(node_id, instance, timeout, sharded)
    }

    fn with_instance(node_id: String, instance: String, timeout: Duration, sharded: bool) -> Link {
        Link {
            inner: Arc::new(Inner {
                node_id,
                instance,
                sharded,
                sharded_pubsub: AtomicBool::new(false),
                conn: Mutex::new(None),
                up: AtomicBool::new(false),
                address: Mutex::new(String::new()),
                failovers: AtomicU64::new(0),
                failed_sessions: AtomicU64::new(0),
                alone: Mutex::new(AloneTime {
                    ended: Duration::ZERO,
                    since: Some(Instant::now()),
                }),
                timeout,
                nodes: AtomicU64::new(1),
                expected: AtomicU64::new(1),
                refused: AtomicU64::new(0),
                refusal_logged: Mutex::new(None),
            }),
        }
    }

    /// A link whose Redis is `commands` (a scripted one), up from the start: what
    /// the unit tests of every part run on.
    #[cfg(test)]
    pub(super) fn on_mock(commands: Vec<redis_test::MockCmd>) -> Link {
        // The instance is the node ID here: the scripted commands name it.
        let link = Link::with_instance("n1".into(), "n1".into(), Duration::from_millis(500), false);
        let conn = Connection::Mock(redis_test::MockRedisConnection::new(commands));
        link.joined(conn, "mock:6379".into());
        link
    }

    /// This node's name in the cluster.
    pub(super) fn node_id(&self) -> &str {
        &self.inner.node_id
    }

    /// This process in the fleet: what the heartbeat counts, the hub's lease
    /// holds, the codes it registers are filed under and its announcements say.
    pub(super) fn instance(&self) -> &str {
        &self.inner.instance
    }

    /// `group` as the part of a key that decides its shard: `{group}` on a Redis
    /// Cluster, so that the keys one script reads land on one shard, and `group`
    /// itself on one Redis (the names nodes of earlier versions use).
    pub(super) fn together(&self, group: &str) -> String {
        if self.inner.sharded {
            format!("{{{group}}}")
        } else {
            group.to_owned()
        }
    }

    /// Whether Redis answers (false: the node works alone).
    pub(super) fn is_up(&self) -> bool {
        self.inner.up.load(Ordering::Relaxed)
    }

    /// `host:port` of the Redis in use, or last used (empty before the first).
    pub(super) fn redis_address(&self) -> String {
        self.inner.address.lock().expect("not poisoned").clone()
    }

    /// Times the master was found at another address than before.
    pub(super) fn failovers(&self) -> u64 {
        self.inner.failovers.load(Ordering::Relaxed)
    }

    /// Time this node has spent without Redis since it started.
    pub(super) fn alone_for(&self) -> Duration {
        self.inner.alone.lock().expect("not poisoned").total()
    }

    /// Counts `nodes` (at least 1) until the first heartbeat gives the fleet's
    /// own count (`cluster.expected_nodes`): a node that starts while Redis is
    /// away takes that share of the budget.
    pub(super) fn expect_nodes(&self, nodes: u64) {
        self.inner.nodes.store(nodes.max(1), Ordering::Relaxed);
        self.inner.expected.store(nodes.max(1), Ordering::Relaxed);
    }

    /// The nodes the fleet is expected to have (`cluster.expected_nodes`, 1 when
    /// not set).
    pub(super) fn expected(&self) -> u64 {
        self.inner.expected.load(Ordering::Relaxed).max(1)
    }

    /// Nodes seen alive recently (this one included; before Redis answered, the
    /// count [`expect_nodes`](Self::expect_nodes) set, else 1).
    pub(super) fn nodes(&self) -> u64 {
        self.inner.nodes.load(Ordering::Relaxed).max(1)
    }

    /// Whether the session's events go out on sharded pub/sub (`SPUBLISH`), set
    /// before it [`joined`](Self::joined).
    pub(super) fn publish_sharded(&self, sharded: bool) {
        self.inner.sharded_pubsub.store(sharded, Ordering::Relaxed);
    }

    /// A new session's data connection, with the address of its Redis (another
    /// than the last is a failover). Marks Redis as answering; true when it was away.
    pub(super) fn joined(&self, conn: Connection, address: String) -> bool {
        {
            let mut current = self.inner.address.lock().expect("not poisoned");
            if !current.is_empty() && *current != address {
                self.inner.failovers.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(node = %self.inner.node_id, from = %current, to = %address, "Redis master moved: this node follows it");
            }
            *current = address;
        }
        *self.inner.conn.lock().expect("not poisoned") = Some(conn);
        self.came_back()
    }

    /// Marks Redis as answering; true when it was away.
    fn came_back(&self) -> bool {
        let was_away = !self.inner.up.swap(true, Ordering::Relaxed);
        if was_away {
            let mut alone = self.inner.alone.lock().expect("not poisoned");
            if let Some(since) = alone.since.take() {
                alone.ended += since.elapsed();
            }
        }
        was_away
    }

    /// Marks Redis as away (once per outage, with `why`, never the URL).
    /// Counts a connection attempt or session that ended in an error.
    pub(super) fn session_failed(&self) {
        self.inner.failed_sessions.fetch_add(1, Ordering::Relaxed);
    }

    /// Attempts to connect, and sessions, that ended in an error so far.
    pub(super) fn failed_sessions(&self) -> u64 {
        self.inner.failed_sessions.load(Ordering::Relaxed)
    }

    pub(super) fn went_away(&self, why: &str) {
        if self.inner.up.swap(false, Ordering::Relaxed) {
            self.inner
                .alone
                .lock()
                .expect("not poisoned")
                .since
                .get_or_insert_with(Instant::now);
            // Once per outage, not once per request. The URL (and its password)
            // is never part of the message.
            tracing::warn!(node = %self.inner.node_id, reason = why, "Redis unreachable: this node works alone until it is back");
        }
    }

    /// Takes in Redis's refusal of a command to this node's ACL user (`NOPERM`): a
    /// misconfiguration, not an outage. Redis stays in use for the commands it
    /// allows; the refused one fails as if Redis were away (the node falls back to
    /// its own share), counted, and said at `error`, the first time and then at
    /// most once a minute.
    fn refused(&self, e: &redis::RedisError) {
        let refused = self.inner.refused.fetch_add(1, Ordering::Relaxed) + 1;
        let mut logged = self.inner.refusal_logged.lock().expect("not poisoned");
        if logged.is_none_or(|at| at.elapsed() >= REFUSALS_LOGGED_EVERY) {
            *logged = Some(Instant::now());
            // Redis's reason names the user and the command, never a password.
            tracing::error!(node = %self.inner.node_id, reason = %e, refused, "Redis refused a command to this node's user: grant it (docs/cluster.md, ACL users); until then the node does without it");
        }
    }

    /// Commands Redis refused to this node's ACL user so far.
    pub(super) fn refusals(&self) -> u64 {
        self.inner.refused.load(Ordering::Relaxed)
    }

    /// Runs one command on the data connection within the timeout; a failure
    /// marks Redis as away (the watcher brings it back), but for a refusal to
    /// this node's user ([`refused`](Self::refused)).
    pub(super) async fn run<T, F, Fut>(&self, op: F) -> Result<T, Unavailable>
    where
        F: FnOnce(Connection) -> Fut,
        Fut: Future<Output = redis::RedisResult<T>>,
    {
        if !self.is_up() {
            return Err(Unavailable);
        }
        let conn = self
            .inner
            .conn
            .lock()
            .expect("cluster lock is never poisoned")
            .clone()
            .ok_or(Unavailable)?;
        match tokio::time::timeout(self.inner.timeout, op(conn)).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) if e.code() == Some("NOPERM") => {
                self.refused(&e);
                Err(Unavailable)
            }
            Ok(Err(e)) => {
                self.went_away(&e.to_string());
                Err(Unavailable)
            }
            Err(_) => {
                self.went_away("no answer within cluster.timeout_ms");
                Err(Unavailable)
            }
        }
    }

    /// Asks the session's Redis whether it answers again (after a slow answer
    /// marked it away); true when it does and was away.
    pub(super) async fn rejoin_if_answering(&self) -> bool {
        let Some(mut conn) = self
            .inner
            .conn
            .lock()
            .expect("cluster lock is never poisoned")
            .clone()
        else {
            return false;
        };
        let ping = redis::cmd("PING");
        let answer = ping.query_async::<String>(&mut conn);
        matches!(
            tokio::time::timeout(self.inner.timeout, answer).await,
            Ok(Ok(_))
        ) && self.came_back()
    }

    /// Says this node is alive every [`HEARTBEAT_EVERY`] and counts the others.
    pub(super) async fn heartbeat(&self, stop: CancellationToken) {
        let mut ticker = tokio::time::interval(HEARTBEAT_EVERY);
        loop {
            tokio::select! {
                _ = ticker.tick() => {}
                () = stop.cancelled() => return,
            }
            self.beat().await;
        }
    }

    /// One heartbeat: this node marked alive, the living counted.
    pub(super) async fn beat(&self) {
        let (key, node) = (nodes_key(), self.inner.instance.clone());
        let counted: Result<u64, Unavailable> = self
            .run(|mut c| async move {
                HEARTBEAT
                    .key(&key)
                    .arg(&node)
                    .arg(NODE_EXPIRES.as_millis() as u64)
                    .invoke_async(&mut c)
                    .await
            })
            .await;
        if let Ok(n) = counted {
            let (n, expected) = (n.max(1), self.expected());
            let before = self.inner.nodes.swap(n, Ordering::Relaxed);
            if n < expected && n != before {
                tracing::warn!(node = %self.inner.node_id, alive = n, expected, "fewer nodes on Redis than cluster.expected_nodes: they draw only their share of the upstream budget, as the others may be cut off on theirs");
            } else if n >= expected && before < expected && expected > 1 {
                tracing::info!(node = %self.inner.node_id, alive = n, expected, "the expected nodes are on Redis: the whole upstream budget is drawn again");
            }
        }
    }

    /// One round of a `SCAN` for `pattern` from where `scan` is (every master of a
    /// Redis Cluster in turn): the keys the round found (any that are not text are
    /// skipped). Done when [`Scan::is_done`].
    pub(super) async fn scan(
        &self,
        scan: &mut Scan,
        pattern: &str,
    ) -> Result<Vec<String>, Unavailable> {
        let found = self
            .run(|mut c| async move { c.scan_round(scan, pattern, SCAN_COUNT).await })
            .await?;
        Ok(found
            .into_iter()
            .filter_map(|k| String::from_utf8(k).ok())
            .collect())
    }

    /// `SET key value NX PX ms`: whether this call set it (no one held it).
    pub(super) async fn set_if_absent(
        &self,
        key: &str,
        value: &str,
        ms: u64,
    ) -> Result<bool, Unavailable> {
        let (key, value) = (key.to_owned(), value.to_owned());
        let taken: Option<String> = self
            .run(|mut c| async move {
                redis::cmd("SET")
                    .arg(&key)
                    .arg(&value)
                    .arg("NX")
                    .arg("PX")
                    .arg(ms)
                    .query_async(&mut c)
                    .await
            })
            .await?;
        Ok(taken.is_some())
    }

    /// Publishes `message` on the events channel (every node hears it, this one too).
    pub(super) async fn publish(&self, message: String) -> Result<(), Unavailable> {
        self.publish_on(events_channel(), message.into_bytes())
            .await
    }

    /// Publishes `message` on `channel`: `SPUBLISH` where the session's events are
    /// sharded (the channel's shard alone carries it), `PUBLISH` otherwise.
    ///
    /// # Errors
    /// [`Unavailable`] when Redis is away or slow.
    pub(super) async fn publish_on(
        &self,
        channel: String,
        message: Vec<u8>,
    ) -> Result<(), Unavailable> {
        let command = if self.inner.sharded_pubsub.load(Ordering::Relaxed) {
            "SPUBLISH"
        } else {
            "PUBLISH"
        };
        self.run(|mut c| async move {
            redis::cmd(command)
                .arg(&channel)
                .arg(message)
                .query_async::<i64>(&mut c)
                .await
        })
        .await
        .map(drop)
    }
}

/// What the unit tests of every part share: the scripted commands.
#[cfg(test)]
pub(super) mod mock {
    use redis_test::MockCmd;

    /// `EVALSHA` of `script` as `invoke_async` sends it.
    pub(crate) fn eval(script: &redis::Script, keys: &[&str], args: &[&str]) -> redis::Cmd {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(script.get_hash())
            .arg(keys.len())
            .arg(keys)
            .arg(args);
        cmd
    }

    /// An error answer (Redis refusing, or a dropped link).
    pub(crate) fn failing(cmd: redis::Cmd) -> MockCmd {
        MockCmd::new::<_, i64>(
            cmd,
            Err(redis::RedisError::from((
                redis::ErrorKind::IoError,
                "connection reset",
            ))),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use redis_test::MockCmd;

    /// The heartbeat counts the living nodes on Redis's clock; an error marks Redis
    /// away and keeps the last count.
    #[tokio::test]
    async fn a_heartbeat_counts_the_nodes_and_a_failure_marks_redis_away() {
        let beat = || mock::eval(&HEARTBEAT, &["mdproxy:v1:nodes"], &["n1", "5000"]);
        let link = Link::on_mock(vec![MockCmd::new(beat(), Ok(3)), mock::failing(beat())]);
        assert_eq!(link.nodes(), 1, "before the first beat");
        link.beat().await;
        assert_eq!(link.nodes(), 3);
        assert!(link.is_up());
        link.beat().await;
        assert!(!link.is_up(), "an error marks Redis away");
        assert_eq!(link.nodes(), 3, "the last count stays");
        link.beat().await;
        assert_eq!(link.nodes(), 3, "away: nothing sent");
    }

    /// A node counts the nodes it was told to expect until a heartbeat counts
    /// them; then the fleet's count wins, fewer or more.
    #[tokio::test]
    async fn the_expected_count_holds_until_the_first_heartbeat() {
        let beat = || mock::eval(&HEARTBEAT, &["mdproxy:v1:nodes"], &["n1", "5000"]);
        let link = Link::on_mock(vec![MockCmd::new(beat(), Ok(2))]);
        link.expect_nodes(4);
        assert_eq!(link.nodes(), 4, "before the first beat");
        link.beat().await;
        assert_eq!(link.nodes(), 2, "the fleet's count");
        link.expect_nodes(0);
        assert_eq!(link.nodes(), 1, "never fewer than this node");
    }

    /// A session at another address than the last counts as a failover; the time
    /// alone stops growing while Redis answers.
    #[tokio::test]
    async fn a_new_address_is_a_failover() {
        let link = Link::on_mock(vec![]);
        assert_eq!(link.redis_address(), "mock:6379");
        link.went_away("test");
        link.joined(
            Connection::Mock(redis_test::MockRedisConnection::new(vec![])),
            "mock:6380".into(),
        );
        link.joined(
            Connection::Mock(redis_test::MockRedisConnection::new(vec![])),
            "mock:6380".into(),
        );
        assert_eq!(link.failovers(), 1);
        assert!(link.is_up());
        let alone = link.alone_for();
        assert_eq!(link.alone_for(), alone, "not alone: the time stays");
    }
}
