//! Several nodes as one cache toward the upstream, on Redis (`[cluster]`): the
//! shared second-level store of answers, the cluster-wide fill lock and its
//! publication, and invalidations. Every operation is bounded by a short timeout;
//! when Redis is away the node works alone (its own cache, single flight and budget),
//! says so once, and rejoins when Redis answers again. Knows bytes and keys only:
//! what an entry holds is the cache's business.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use redis::aio::ConnectionManager;
use tokio::sync::{Notify, broadcast};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::ClusterConfig;

/// Prefix of every key and channel, versioned with the entry format.
const PREFIX: &str = "mdproxy:v1";
/// How often a node whose Redis is away checks whether it is back.
const RETRY_EVERY: Duration = Duration::from_millis(500);
/// How often a node says it is alive (the node count divides the budget when
/// Redis is away).
const HEARTBEAT_EVERY: Duration = Duration::from_secs(1);
/// A node silent for this long no longer counts.
const NODE_EXPIRES: Duration = Duration::from_secs(5);

/// The hub's leader lease: taken when free (a new term), renewed by its holder.
/// Returns the holder's term, or 0 when another node holds it. Terms never go
/// back, even when Redis lost its data (a restart without persistence, an
/// eviction): a new term is at least Redis's clock in milliseconds.
const LEAD: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local holder = redis.call('GET', KEYS[1])
local term = tonumber(redis.call('GET', KEYS[2]) or 0)
if not holder then
  term = math.max(term + 1, now)
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  redis.call('SET', KEYS[2], term)
  return term
end
if holder == ARGV[1] then
  if term == 0 then
    term = now
    redis.call('SET', KEYS[2], term)
  end
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return term
end
return 0
";

/// A node's heartbeat on Redis's clock (one clock for every node): marks the node
/// alive, forgets nodes silent for ARGV[2] ms, and returns how many are left.
const HEARTBEAT: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], 0, now - tonumber(ARGV[2]))
return redis.call('ZCARD', KEYS[1])
";

/// The cluster-wide budget: GCRA on Redis's clock, in microseconds. Returns 0 when
/// a permit is granted, else how many microseconds until one may be.
const GCRA: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
local tolerance = tonumber(ARGV[2])
local tat = tonumber(redis.call('GET', KEYS[1]) or now)
if tat < now then tat = now end
local allow_at = tat - tolerance
if now < allow_at then return allow_at - now end
local next_tat = tat + interval
redis.call('SET', KEYS[1], next_tat, 'PX', math.ceil((next_tat - now) / 1000) + 1000)
return 0
";

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
    client: redis::Client,
    /// The data connection, made by the watcher (None until Redis first answers).
    conn: Mutex<Option<ConnectionManager>>,
    up: AtomicBool,
    timeout: Duration,
    max_body: usize,
    /// Fills this node waits for, by key, woken by another node's publication.
    waiters: Mutex<HashMap<String, Arc<Filled>>>,
    /// Keys another node purged: the application drops them from its own cache.
    invalidations: broadcast::Sender<String>,
    /// Answers found in the shared store.
    pub shared_hits: AtomicU64,
    /// Nodes seen alive at the last heartbeat (at least 1).
    nodes: AtomicU64,
    /// The latest quote board the hub's leader published, and its term.
    board: Mutex<(u64, Arc<HashMap<String, Bytes>>)>,
    /// Woken when a board arrives.
    board_arrived: Notify,
}

/// A fill another node announced.
#[derive(Default)]
struct Filled {
    done: AtomicBool,
    notify: Notify,
}

/// The right to fill one key for the whole cluster; released by [`Cluster::release`].
#[derive(Debug)]
pub struct Lease {
    key: String,
    token: String,
}

/// Waits for another node's fill of one key; deregisters when dropped.
pub struct Waiter {
    cluster: Cluster,
    key: String,
    filled: Arc<Filled>,
}

impl Cluster {
    /// Connects in the background as a task of `tracker` (until `stop`): the node
    /// starts at once and joins when Redis answers.
    ///
    /// # Errors
    /// When `redis_url` is not a Redis URL.
    pub fn start(
        config: &ClusterConfig,
        tracker: &TaskTracker,
        stop: CancellationToken,
    ) -> Result<Cluster, String> {
        let client = redis::Client::open(config.redis_url.expose())
            .map_err(|_| "cluster.redis_url is not a redis:// URL".to_owned())?;
        let node_id = if config.node_id.is_empty() {
            default_node_id()
        } else {
            config.node_id.clone()
        };
        let (invalidations, _) = broadcast::channel(1024);
        let cluster = Cluster {
            inner: Arc::new(Inner {
                node_id,
                client,
                conn: Mutex::new(None),
                up: AtomicBool::new(false),
                timeout: Duration::from_millis(config.timeout_ms),
                max_body: config.max_l2_body_bytes,
                waiters: Mutex::new(HashMap::new()),
                invalidations,
                shared_hits: AtomicU64::new(0),
                nodes: AtomicU64::new(1),
                board: Mutex::new((0, Arc::new(HashMap::new()))),
                board_arrived: Notify::new(),
            }),
        };
        let watcher = cluster.clone();
        let watch_stop = stop.clone();
        tracker.spawn(async move { watcher.watch(watch_stop).await });
        let beating = cluster.clone();
        tracker.spawn(async move { beating.heartbeat(stop).await });
        Ok(cluster)
    }

    /// This node's name in the cluster.
    pub fn node_id(&self) -> &str {
        &self.inner.node_id
    }

    /// Whether Redis answers (false: the node works alone).
    pub fn is_up(&self) -> bool {
        self.inner.up.load(Ordering::Relaxed)
    }

    /// Largest body shared through Redis; larger ones stay local.
    pub fn max_body(&self) -> usize {
        self.inner.max_body
    }

    /// Answers this node found in the shared store.
    pub fn shared_hits(&self) -> u64 {
        self.inner.shared_hits.load(Ordering::Relaxed)
    }

    /// Nodes seen alive recently (this one included; 1 before Redis answered).
    pub fn nodes(&self) -> u64 {
        self.inner.nodes.load(Ordering::Relaxed).max(1)
    }

    /// Asks the cluster-wide budget for one permit: `interval` between permits,
    /// `tolerance` how far ahead of that schedule one may be taken (the burst).
    /// Returns zero when granted, else how long until one may be.
    ///
    /// # Errors
    /// [`Unavailable`] when Redis is away or slow.
    pub async fn take_permit(
        &self,
        interval: Duration,
        tolerance: Duration,
    ) -> Result<Duration, Unavailable> {
        let key = format!("{PREFIX}:budget");
        let (interval, tolerance) = (interval.as_micros() as u64, tolerance.as_micros() as u64);
        let wait: u64 = self
            .run(|mut c| async move {
                redis::Script::new(GCRA)
                    .key(&key)
                    .arg(interval)
                    .arg(tolerance)
                    .invoke_async(&mut c)
                    .await
            })
            .await?;
        Ok(Duration::from_micros(wait))
    }

    /// Says this node is alive every [`HEARTBEAT_EVERY`] and counts the others.
    async fn heartbeat(&self, stop: CancellationToken) {
        let key = format!("{PREFIX}:nodes");
        let mut ticker = tokio::time::interval(HEARTBEAT_EVERY);
        loop {
            tokio::select! {
                _ = ticker.tick() => {}
                () = stop.cancelled() => return,
            }
            let (key, node) = (key.clone(), self.inner.node_id.clone());
            let counted: Result<u64, Unavailable> = self
                .run(|mut c| async move {
                    redis::Script::new(HEARTBEAT)
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
    }

    /// Keys purged anywhere in the cluster, to drop from this node's cache.
    pub fn invalidations(&self) -> broadcast::Receiver<String> {
        self.inner.invalidations.subscribe()
    }

    fn entry_key(key: &str) -> String {
        format!("{PREFIX}:entry:{key}")
    }

    fn channel() -> String {
        format!("{PREFIX}:events")
    }

    fn board_channel() -> String {
        format!("{PREFIX}:board")
    }

    /// Runs one command on the data connection within the timeout; a failure
    /// marks Redis as away (the watcher brings it back).
    async fn run<T, F, Fut>(&self, op: F) -> Result<T, Unavailable>
    where
        F: FnOnce(ConnectionManager) -> Fut,
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
            // Once per outage, not once per request. The URL (and its password)
            // is never part of the message.
            tracing::warn!(node = %self.inner.node_id, reason = why, "Redis unreachable: this node works alone until it is back");
        }
    }

    /// The shared answer stored under `key`, if any.
    ///
    /// # Errors
    /// [`Unavailable`] when Redis is away or slow.
    pub async fn get(&self, key: &str) -> Result<Option<Bytes>, Unavailable> {
        let redis_key = Self::entry_key(key);
        let found: Option<Vec<u8>> = self
            .run(|mut c| async move { redis::cmd("GET").arg(&redis_key).query_async(&mut c).await })
            .await?;
        if found.is_some() {
            self.inner.shared_hits.fetch_add(1, Ordering::Relaxed);
        }
        Ok(found.map(Bytes::from))
    }

    /// Stores `value` under `key` for `ttl` (unless larger than `max_l2_body_bytes`).
    pub async fn put(&self, key: &str, value: &[u8], ttl: Duration) {
        if value.len() <= self.inner.max_body {
            let (redis_key, ms) = (Self::entry_key(key), ttl.as_millis().max(1) as u64);
            let _ = self
                .run(|mut c| async move {
                    redis::cmd("SET")
                        .arg(&redis_key)
                        .arg(value)
                        .arg("PX")
                        .arg(ms)
                        .query_async::<()>(&mut c)
                        .await
                })
                .await;
        }
    }

    /// Tells every node (this one too) that `key` was filled or purged.
    async fn publish(&self, event: &str, key: &str) {
        let message = format!("{event} {key}");
        let _ = self
            .run(|mut c| async move {
                redis::cmd("PUBLISH")
                    .arg(Self::channel())
                    .arg(&message)
                    .query_async::<i64>(&mut c)
                    .await
            })
            .await;
    }

    /// Tells the nodes waiting for `key` that this node's fill is over: they find
    /// the answer in the store, or (after a failure) one of them takes the lease.
    pub async fn announce(&self, key: &str) {
        self.publish("filled", key).await;
    }

    /// Drops `key` from the shared store and from every node's cache.
    pub async fn purge(&self, key: &str) {
        let redis_key = Self::entry_key(key);
        let _ = self
            .run(|mut c| async move {
                redis::cmd("DEL")
                    .arg(&redis_key)
                    .query_async::<i64>(&mut c)
                    .await
            })
            .await;
        self.publish("purge", key).await;
    }

    /// Takes the cluster-wide right to fill `key` for `lease` (`SET NX PX`): `Some`
    /// when this node is to ask the upstream, `None` when another node is asking.
    ///
    /// # Errors
    /// [`Unavailable`] when Redis is away or slow.
    pub async fn try_lock(&self, key: &str, lease: Duration) -> Result<Option<Lease>, Unavailable> {
        let lock = Lease {
            key: format!("{PREFIX}:lock:{key}"),
            token: format!("{}:{:016x}", self.inner.node_id, fastrand::u64(..)),
        };
        let (k, t, ms) = (
            lock.key.clone(),
            lock.token.clone(),
            lease.as_millis() as u64,
        );
        let taken: Option<String> = self
            .run(|mut c| async move {
                redis::cmd("SET")
                    .arg(&k)
                    .arg(&t)
                    .arg("NX")
                    .arg("PX")
                    .arg(ms)
                    .query_async(&mut c)
                    .await
            })
            .await?;
        Ok(taken.map(|_| lock))
    }

    /// Gives a lease back (compare-and-delete: a lease that expired and went to
    /// another node is not touched).
    pub async fn release(&self, lease: Lease) {
        let script = redis::Script::new(
            "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end",
        );
        let _ = self
            .run(|mut c| async move {
                script
                    .key(&lease.key)
                    .arg(&lease.token)
                    .invoke_async::<i64>(&mut c)
                    .await
            })
            .await;
    }

    /// Claims one run of a scheduled job for the whole cluster: `true` for the
    /// first node that asks for this `slot` (the second it fired in), `false` for
    /// the others.
    ///
    /// # Errors
    /// [`Unavailable`] when Redis is away or slow (the node then runs it itself).
    pub async fn claim(&self, job: &str, slot: i64) -> Result<bool, Unavailable> {
        let key = format!("{PREFIX}:job:{job}:{slot}");
        let node = self.inner.node_id.clone();
        let taken: Option<String> = self
            .run(|mut c| async move {
                redis::cmd("SET")
                    .arg(&key)
                    .arg(&node)
                    .arg("NX")
                    .arg("PX")
                    .arg(60_000)
                    .query_async(&mut c)
                    .await
            })
            .await?;
        Ok(taken.is_some())
    }

    /// Registers interest in another node's fill of `key` (before asking for the
    /// lock, so a publication in between is not missed).
    pub fn waiter(&self, key: &str) -> Waiter {
        let filled = Arc::clone(
            self.inner
                .waiters
                .lock()
                .expect("cluster lock is never poisoned")
                .entry(key.to_owned())
                .or_default(),
        );
        Waiter {
            cluster: self.clone(),
            key: key.to_owned(),
            filled,
        }
    }

    /// Keeps the data connection and the event subscription up: connects, reads
    /// publications until the connection drops, and tries again every
    /// [`RETRY_EVERY`] while Redis is away.
    async fn watch(&self, stop: CancellationToken) {
        loop {
            let session = async {
                let config = redis::aio::ConnectionManagerConfig::new()
                    .set_connection_timeout(self.inner.timeout)
                    .set_response_timeout(self.inner.timeout)
                    .set_number_of_retries(1);
                let conn =
                    ConnectionManager::new_with_config(self.inner.client.clone(), config).await?;
                let mut pubsub = self.inner.client.get_async_pubsub().await?;
                pubsub.subscribe(Self::channel()).await?;
                pubsub.subscribe(Self::board_channel()).await?;
                *self
                    .inner
                    .conn
                    .lock()
                    .expect("cluster lock is never poisoned") = Some(conn);
                // A new subscription may follow a Redis that lost its data: take the
                // next leader's board whatever its term.
                self.inner
                    .board
                    .lock()
                    .expect("cluster lock is never poisoned")
                    .0 = 0;
                if !self.inner.up.swap(true, Ordering::Relaxed) {
                    tracing::info!(node = %self.inner.node_id, "Redis reachable: this node shares its cache with the cluster");
                }
                let mut messages = pubsub.into_on_message();
                let mut check = tokio::time::interval(RETRY_EVERY);
                loop {
                    tokio::select! {
                        message = messages.next() => {
                            let Some(message) = message else { break };
                            if message.get_channel_name() == Self::board_channel() {
                                self.on_board(message.get_payload_bytes());
                            } else {
                                self.on_event(message.get_payload_bytes());
                            }
                        }
                        // A slow answer marked Redis away while the subscription
                        // stayed up: back as soon as it answers a PING in time.
                        _ = check.tick(), if !self.is_up() => self.rejoin_if_answering().await,
                    }
                }
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
            self.went_away(&why);
            tokio::select! {
                () = tokio::time::sleep(RETRY_EVERY) => {}
                () = stop.cancelled() => return,
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
            && !self.inner.up.swap(true, Ordering::Relaxed)
        {
            tracing::info!(node = %self.inner.node_id, "Redis answers again: this node shares its cache with the cluster");
        }
    }

    fn on_event(&self, payload: &[u8]) {
        let Ok(text) = std::str::from_utf8(payload) else {
            return;
        };
        match text.split_once(' ') {
            Some(("filled", key)) => {
                let waiters = self
                    .inner
                    .waiters
                    .lock()
                    .expect("cluster lock is never poisoned");
                if let Some(filled) = waiters.get(key) {
                    filled.done.store(true, Ordering::SeqCst);
                    filled.notify.notify_waiters();
                }
            }
            Some(("purge", key)) => {
                let _ = self.inner.invalidations.send(key.to_owned());
            }
            _ => {}
        }
    }
}

/// The hub's share of the cluster: every node registers the codes its subscribers
/// want; one node (the leader, by a renewed lease with a term) polls the union and
/// publishes each board; the others take the leader's boards.
impl Cluster {
    /// Registers this node's codes for `ttl` (a dead node's codes drop out).
    pub async fn register_codes(&self, codes: &[String], ttl: Duration) {
        let (key, value) = (
            format!("{PREFIX}:hub:codes:{}", self.inner.node_id),
            codes.join(","),
        );
        let ms = ttl.as_millis() as u64;
        let _ = self
            .run(|mut c| async move {
                redis::cmd("SET")
                    .arg(&key)
                    .arg(&value)
                    .arg("PX")
                    .arg(ms)
                    .query_async::<()>(&mut c)
                    .await
            })
            .await;
    }

    /// Takes or renews the hub's leader lease for `lease`: `Some(term)` while this
    /// node leads, `None` while another does.
    ///
    /// # Errors
    /// [`Unavailable`] when Redis is away or slow.
    pub async fn lead_hub(&self, lease: Duration) -> Result<Option<u64>, Unavailable> {
        let keys = (format!("{PREFIX}:hub:leader"), format!("{PREFIX}:hub:term"));
        let (node, ms) = (self.inner.node_id.clone(), lease.as_millis() as u64);
        let term: u64 = self
            .run(|mut c| async move {
                redis::Script::new(LEAD)
                    .key(&keys.0)
                    .key(&keys.1)
                    .arg(&node)
                    .arg(ms)
                    .invoke_async(&mut c)
                    .await
            })
            .await?;
        Ok((term > 0).then_some(term))
    }

    /// The union of the codes every live node registered.
    ///
    /// # Errors
    /// [`Unavailable`] when Redis is away or slow.
    pub async fn all_codes(&self) -> Result<Vec<String>, Unavailable> {
        let nodes_key = format!("{PREFIX}:nodes");
        let nodes: Vec<String> = self
            .run(|mut c| async move {
                redis::cmd("ZRANGE")
                    .arg(&nodes_key)
                    .arg(0)
                    .arg(-1)
                    .query_async(&mut c)
                    .await
            })
            .await?;
        let mut keys: Vec<String> = nodes
            .iter()
            .map(|n| format!("{PREFIX}:hub:codes:{n}"))
            .collect();
        keys.push(format!("{PREFIX}:hub:codes:{}", self.inner.node_id));
        let lists: Vec<Option<String>> = self
            .run(|mut c| async move { redis::cmd("MGET").arg(&keys).query_async(&mut c).await })
            .await?;
        let mut union: Vec<String> = lists
            .iter()
            .flatten()
            .flat_map(|list| list.split(','))
            .filter(|code| !code.is_empty())
            .map(str::to_owned)
            .collect();
        union.sort_unstable();
        union.dedup();
        Ok(union)
    }

    /// Publishes the leader's board of `term`: one line per code, `code\trow`.
    pub async fn publish_board(&self, term: u64, rows: &HashMap<String, Bytes>) {
        let mut message =
            Vec::with_capacity(16 + rows.values().map(|r| r.len() + 16).sum::<usize>());
        message.extend_from_slice(term.to_string().as_bytes());
        for (code, row) in rows {
            message.push(b'\n');
            message.extend_from_slice(code.as_bytes());
            message.push(b'\t');
            message.extend_from_slice(row);
        }
        let _ = self
            .run(|mut c| async move {
                redis::cmd("PUBLISH")
                    .arg(Self::board_channel())
                    .arg(message)
                    .query_async::<i64>(&mut c)
                    .await
            })
            .await;
    }

    /// The latest board a leader published (rows by code).
    pub fn latest_board(&self) -> Arc<HashMap<String, Bytes>> {
        Arc::clone(
            &self
                .inner
                .board
                .lock()
                .expect("cluster lock is never poisoned")
                .1,
        )
    }

    /// Resolves when the next board arrives.
    pub async fn board_arrived(&self) {
        self.inner.board_arrived.notified().await;
    }

    /// Takes a published board, unless an older term's (a deposed leader's).
    fn on_board(&self, payload: &[u8]) {
        let mut lines = payload.split(|b| *b == b'\n');
        let Some(term) = lines
            .next()
            .and_then(|t| std::str::from_utf8(t).ok())
            .and_then(|t| t.parse::<u64>().ok())
        else {
            return;
        };
        let rows: HashMap<String, Bytes> = lines
            .filter_map(|line| {
                let tab = line.iter().position(|b| *b == b'\t')?;
                let code = std::str::from_utf8(&line[..tab]).ok()?.to_owned();
                Some((code, Bytes::copy_from_slice(&line[tab + 1..])))
            })
            .collect();
        let mut board = self
            .inner
            .board
            .lock()
            .expect("cluster lock is never poisoned");
        if term >= board.0 {
            *board = (term, Arc::new(rows));
            drop(board);
            self.inner.board_arrived.notify_waiters();
        }
    }
}

impl Waiter {
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
        let mut waiters = self
            .cluster
            .inner
            .waiters
            .lock()
            .expect("cluster lock is never poisoned");
        // The map's copy and this one: no other waiter on this node.
        if Arc::strong_count(&self.filled) <= 2 {
            waiters.remove(&self.key);
        }
    }
}

/// Host name and process id.
fn default_node_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "node".to_owned());
    format!("{host}-{}", std::process::id())
}
