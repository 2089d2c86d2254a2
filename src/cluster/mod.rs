//! Several nodes as one cache toward the upstream, on Redis (`[cluster]`): the link
//! itself (connecting, up and down, rejoining, the events it hears, the node count).
//! Every operation is bounded by a short timeout; when Redis is away the node works
//! alone (its own cache, single flight and budget), says so once, and rejoins when
//! Redis answers again. What is shared lives in the children; the rest of mdproxy
//! sees only their narrow traits ([`Fleet`]), whose single-node versions are the
//! defaults.
//!
//! - `conn`: the one place that makes (and remakes) the connections.
//! - [`store`]: the shared store of answers and cluster-wide purges.
//! - [`lock`]: the fill lock (one node per key asks the upstream) and its publication.
//! - [`permits`]: the fleet's upstream budget (GCRA on Redis's clock).
//! - [`limits`]: the upstream's pushback shared by the fleet: `Retry-After` pauses,
//!   the adaptive rate, the vendor quotas.
//! - [`jobs`]: one run of each scheduled job for the fleet.
//! - [`leader`]: the hub's leader lease and the board it relays.
//! - [`fleet`]: the traits, the single node's versions, and [`Fleet`] that holds one
//!   of each.

mod conn;
pub mod fleet;
pub mod jobs;
pub mod leader;
pub mod limits;
pub mod lock;
pub mod permits;
pub mod store;

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::ClusterConfig;
use conn::{Connection, Connector};

pub use fleet::{Alone, FillLock, Fleet, FleetLimits, JobClaims, Leadership, Permits, SharedStore};
pub use lock::{Lease, Waiter};

/// Prefix of every key and channel, versioned with the entry format.
const PREFIX: &str = "mdproxy:v1";
/// How often a node whose Redis is away checks whether it is back.
const RETRY_EVERY: Duration = Duration::from_millis(500);
/// How often a node says it is alive (the node count divides the budget when
/// Redis is away).
const HEARTBEAT_EVERY: Duration = Duration::from_secs(1);
/// A node silent for this long no longer counts.
const NODE_EXPIRES: Duration = Duration::from_secs(5);

/// Keys `SCAN` looks at per round (a purge, the pauses kept).
const SCAN_COUNT: usize = 500;

/// Marks a node alive and counts the living (`scripts/heartbeat.lua`).
static HEARTBEAT: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(include_str!("scripts/heartbeat.lua")));

/// Why a cluster operation did not happen; the caller carries on alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unavailable;

/// One node's link to the cluster. Cheap to clone.
#[derive(Clone)]
pub struct Cluster {
    inner: Arc<Inner>,
}

struct Inner {
    node_id: String,
    /// Makes the connections (`None` in unit tests, whose connection is scripted).
    connector: Option<Connector>,
    /// The data connection, made by the watcher (None until Redis first answers).
    conn: Mutex<Option<Connection>>,
    up: AtomicBool,
    /// `host:port` of the Redis of the last session (empty before the first).
    address: Mutex<String>,
    /// Sessions that found the master at another address than the one before.
    failovers: AtomicU64,
    /// Time this node has spent without Redis.
    alone: Mutex<AloneTime>,
    timeout: Duration,
    /// Nodes seen alive at the last heartbeat (at least 1).
    nodes: AtomicU64,
    store: store::Local,
    fills: lock::Waiters,
    board: leader::Board,
    limits: limits::Heard,
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

/// The channel of fills, purges and the upstream's pushback.
fn events_channel() -> String {
    format!("{PREFIX}:events")
}

impl Cluster {
    /// Connects in the background as a task of `tracker` (until `stop`): the node
    /// starts at once and joins when Redis answers.
    ///
    /// # Errors
    /// When `redis_url` is not a URL this build can connect to.
    pub fn start(
        config: &ClusterConfig,
        tracker: &TaskTracker,
        stop: CancellationToken,
    ) -> Result<Cluster, String> {
        let connector = Connector::new(config)?;
        let node_id = if config.node_id.is_empty() {
            default_node_id()
        } else {
            config.node_id.clone()
        };
        let cluster = Cluster::build(node_id, Some(connector), config);
        let watcher = cluster.clone();
        let watch_stop = stop.clone();
        tracker.spawn(async move { watcher.watch(watch_stop).await });
        let beating = cluster.clone();
        tracker.spawn(async move { beating.heartbeat(stop).await });
        Ok(cluster)
    }

    fn build(node_id: String, connector: Option<Connector>, config: &ClusterConfig) -> Cluster {
        Cluster {
            inner: Arc::new(Inner {
                node_id,
                connector,
                conn: Mutex::new(None),
                up: AtomicBool::new(false),
                address: Mutex::new(String::new()),
                failovers: AtomicU64::new(0),
                alone: Mutex::new(AloneTime {
                    ended: Duration::ZERO,
                    since: Some(Instant::now()),
                }),
                timeout: Duration::from_millis(config.timeout_ms),
                nodes: AtomicU64::new(1),
                store: store::Local::new(config.max_l2_body_bytes),
                fills: lock::Waiters::default(),
                board: leader::Board::default(),
                limits: limits::Heard::default(),
            }),
        }
    }

    /// A node whose Redis is `conn` (a scripted one), up from the start, with no
    /// watcher or heartbeat: what the unit tests of every part run on.
    #[cfg(test)]
    fn on_mock(commands: Vec<redis_test::MockCmd>) -> Cluster {
        let config = ClusterConfig {
            node_id: "n1".into(),
            ..ClusterConfig::default()
        };
        let cluster = Cluster::build("n1".into(), None, &config);
        *cluster.inner.conn.lock().expect("not poisoned") = Some(Connection::Mock(
            redis_test::MockRedisConnection::new(commands),
        ));
        cluster.came_back();
        cluster
    }

    /// This node's name in the cluster.
    pub fn node_id(&self) -> &str {
        &self.inner.node_id
    }

    /// Whether Redis answers (false: the node works alone).
    pub fn is_up(&self) -> bool {
        self.inner.up.load(Ordering::Relaxed)
    }

    /// `host:port` of the Redis in use, or last used (empty before the first).
    pub fn redis_address(&self) -> String {
        self.inner.address.lock().expect("not poisoned").clone()
    }

    /// Times the master was found at another address than before (a failover
    /// the sentinels made).
    pub fn failovers(&self) -> u64 {
        self.inner.failovers.load(Ordering::Relaxed)
    }

    /// Time this node has spent without Redis since it started (the wait for the
    /// first answer included).
    pub fn alone_for(&self) -> Duration {
        self.inner.alone.lock().expect("not poisoned").total()
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

    /// Nodes seen alive recently (this one included; 1 before Redis answered).
    pub fn nodes(&self) -> u64 {
        self.inner.nodes.load(Ordering::Relaxed).max(1)
    }

    /// Runs one command on the data connection within the timeout; a failure
    /// marks Redis as away (the watcher brings it back).
    async fn run<T, F, Fut>(&self, op: F) -> Result<T, Unavailable>
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

    fn went_away(&self, why: &str) {
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

    /// Says this node is alive every [`HEARTBEAT_EVERY`] and counts the others.
    async fn heartbeat(&self, stop: CancellationToken) {
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
    async fn beat(&self) {
        let (key, node) = (nodes_key(), self.inner.node_id.clone());
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
            self.inner.nodes.store(n.max(1), Ordering::Relaxed);
        }
    }

    /// Keeps the data connection and the event subscription up: connects, reads
    /// publications until the connection drops, and tries again every
    /// [`RETRY_EVERY`] while Redis is away. A node that cannot reach Redis at start
    /// says so once (why, never the URL).
    async fn watch(&self, stop: CancellationToken) {
        let Some(connector) = &self.inner.connector else {
            return;
        };
        let mut first = true;
        loop {
            let session = async {
                let channels = [events_channel(), leader::board_channel()];
                let channels: Vec<&str> = channels.iter().map(String::as_str).collect();
                let session = connector.connect(&channels).await?;
                first = false;
                self.moved_to(session.address);
                *self
                    .inner
                    .conn
                    .lock()
                    .expect("cluster lock is never poisoned") = Some(session.conn);
                // A new subscription may follow a Redis that lost its data: take the
                // next leader's board whatever its term.
                self.inner.board.forget_term();
                if self.came_back() {
                    tracing::info!(node = %self.inner.node_id, redis = %self.redis_address(), "Redis reachable: this node shares its cache with the cluster");
                }
                self.beat().await;
                self.recall_pauses().await;
                self.listen(session.pubsub.into_on_message()).await;
                Ok::<(), redis::RedisError>(())
            };
            let ended = tokio::select! {
                ended = session => ended,
                () = stop.cancelled() => return,
            };
            let why = match ended {
                Ok(()) => "the event subscription ended".to_owned(),
                Err(e) => e.to_string(),
            };
            if first {
                // Never up yet: `went_away` would stay silent (it speaks on a change).
                first = false;
                tracing::warn!(node = %self.inner.node_id, reason = why, "Redis unreachable at start: this node works alone until it answers");
            }
            self.went_away(&why);
            tokio::select! {
                () = tokio::time::sleep(RETRY_EVERY) => {}
                () = stop.cancelled() => return,
            }
        }
    }

    /// Notes the address of a new session; another than the last is a failover.
    fn moved_to(&self, address: String) {
        let mut current = self.inner.address.lock().expect("not poisoned");
        if !current.is_empty() && *current != address {
            self.inner.failovers.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(node = %self.inner.node_id, from = %current, to = %address, "Redis master moved: this node follows it");
        }
        *current = address;
    }

    /// Takes in the publications of `messages` until they end; meanwhile, while
    /// Redis is marked away (a slow answer, with the subscription still up), asks
    /// every [`RETRY_EVERY`] whether it answers again, or, where the master may
    /// have moved (sentinels), ends the session so the next asks the sentinels.
    async fn listen(&self, messages: impl futures_util::Stream<Item = redis::Msg>) {
        tokio::pin!(messages);
        let mut check = tokio::time::interval(RETRY_EVERY);
        check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                message = messages.next() => {
                    let Some(message) = message else { return };
                    if message.get_channel_name() == leader::board_channel() {
                        self.inner.board.take(message.get_payload_bytes(), leader::wall_ms());
                    } else {
                        self.on_event(message.get_payload_bytes());
                    }
                }
                // Always polled: the away mark is set by other tasks, which do not
                // wake this one (a guard `if !self.is_up()` here was evaluated only
                // when a publication woke the loop, so a quiet node stayed alone).
                _ = check.tick() => {
                    if !self.is_up() {
                        if self.inner.connector.as_ref().is_some_and(Connector::follows_failover) {
                            return;
                        }
                        self.rejoin_if_answering().await;
                    }
                }
            }
        }
    }

    async fn rejoin_if_answering(&self) {
        let Some(mut conn) = self
            .inner
            .conn
            .lock()
            .expect("cluster lock is never poisoned")
            .clone()
        else {
            return;
        };
        let ping = redis::cmd("PING");
        let answer = ping.query_async::<String>(&mut conn);
        if let Ok(Ok(_)) = tokio::time::timeout(self.inner.timeout, answer).await
            && self.came_back()
        {
            tracing::info!(node = %self.inner.node_id, "Redis answers again: this node shares its cache with the cluster");
        }
    }

    /// One publication on the events channel: `<kind> <rest>`.
    fn on_event(&self, payload: &[u8]) {
        let Ok(text) = std::str::from_utf8(payload) else {
            return;
        };
        match text.split_once(' ') {
            Some(("filled", key)) => self.inner.fills.wake(key),
            Some(("purge", what)) => self.inner.store.purged(what),
            Some((kind, rest)) => self.inner.limits.heard(kind, rest, &self.inner.node_id),
            None => {}
        }
    }

    /// One round of a `SCAN` for `pattern` from `cursor`: the next cursor (0: done)
    /// and the keys the round found (any that are not text are skipped).
    async fn scan(&self, cursor: u64, pattern: &str) -> Result<(u64, Vec<String>), Unavailable> {
        let pattern = pattern.to_owned();
        let (next, found): (u64, Vec<Vec<u8>>) = self
            .run(|mut c| async move {
                redis::cmd("SCAN")
                    .arg(cursor)
                    .arg("MATCH")
                    .arg(&pattern)
                    .arg("COUNT")
                    .arg(SCAN_COUNT)
                    .query_async(&mut c)
                    .await
            })
            .await?;
        let keys = found
            .into_iter()
            .filter_map(|k| String::from_utf8(k).ok())
            .collect();
        Ok((next, keys))
    }

    /// `SET key value NX PX ms`: whether this call set it (no one held it).
    async fn set_if_absent(&self, key: &str, value: &str, ms: u64) -> Result<bool, Unavailable> {
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
    async fn publish(&self, message: String) {
        let _ = self
            .run(|mut c| async move {
                redis::cmd("PUBLISH")
                    .arg(events_channel())
                    .arg(&message)
                    .query_async::<i64>(&mut c)
                    .await
            })
            .await;
    }
}

/// The sorted set of living nodes (scored by their last heartbeat).
fn nodes_key() -> String {
    format!("{PREFIX}:nodes")
}

/// Host name and process id.
fn default_node_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "node".to_owned());
    format!("{host}-{}", std::process::id())
}

/// What the unit tests of every part share: the scripted commands.
#[cfg(test)]
mod mock {
    use redis_test::MockCmd;

    /// `EVALSHA` of `script` as `invoke_async` sends it.
    pub(super) fn eval(script: &redis::Script, keys: &[&str], args: &[&str]) -> redis::Cmd {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(script.get_hash())
            .arg(keys.len())
            .arg(keys)
            .arg(args);
        cmd
    }

    /// An error answer (Redis refusing, or a dropped link).
    pub(super) fn failing(cmd: redis::Cmd) -> MockCmd {
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
        let cluster = Cluster::on_mock(vec![MockCmd::new(beat(), Ok(3)), mock::failing(beat())]);
        assert_eq!(cluster.nodes(), 1, "before the first beat");
        cluster.beat().await;
        assert_eq!(cluster.nodes(), 3);
        assert!(cluster.is_up());
        cluster.beat().await;
        assert!(!cluster.is_up(), "an error marks Redis away");
        assert_eq!(cluster.nodes(), 3, "the last count stays");
        cluster.beat().await;
        assert_eq!(cluster.nodes(), 3, "away: nothing sent");
    }

    /// Publications are routed to their part: fills wake waiters, purges reach the
    /// cache, unknown kinds and bytes are ignored.
    #[tokio::test]
    async fn events_reach_their_part() {
        let cluster = Cluster::on_mock(vec![]);
        let mut purged = cluster.inner.store.invalidations();
        let waiter = FillLock::waiter(&cluster, "/k");
        cluster.on_event(b"filled /k");
        assert!(waiter.wait(Duration::ZERO).await);
        cluster.on_event(b"purge prefix /stock/");
        assert_eq!(purged.try_recv().unwrap(), "prefix /stock/");
        cluster.on_event(b"\xff\xfe");
        cluster.on_event(b"nonsense");
        assert!(purged.try_recv().is_err());
    }

    /// Defect: after a short stall (a slow answer marked Redis away while the
    /// subscription stayed up), a node with no traffic stayed alone for good: the
    /// re-check only ran when a publication woke the watcher. Time is paused; the
    /// re-check must come by itself within [`RETRY_EVERY`].
    #[tokio::test(start_paused = true)]
    async fn a_node_marked_away_rejoins_without_traffic() {
        let cluster = Cluster::on_mock(vec![
            mock::failing(redis::cmd("GET").arg("x").clone()),
            MockCmd::new(redis::cmd("PING"), Ok("PONG")),
        ]);
        // The watcher's loop on a subscription where nothing is ever published,
        // entered while Redis is up.
        let quiet = futures_util::stream::pending::<redis::Msg>();
        let watching = cluster.clone();
        let task = tokio::spawn(async move { watching.listen(quiet).await });
        tokio::time::sleep(RETRY_EVERY * 2).await;
        let _ = cluster
            .run(|mut c| async move { redis::cmd("GET").arg("x").query_async::<i64>(&mut c).await })
            .await;
        assert!(!cluster.is_up());
        tokio::time::sleep(RETRY_EVERY * 3).await;
        assert!(cluster.is_up(), "still alone after three re-check periods");
        task.abort();
    }
}
