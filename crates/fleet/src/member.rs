//! This node as a member of the fleet: the link and one of each shared part on it,
//! and the watcher that keeps the link up (connects, follows a failover, re-checks
//! every [`RETRY_EVERY`] while Redis is away) and hands each publication to its part.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use futures_util::{FutureExt, StreamExt};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::agents::RedisAgentSessions;
use super::conn::{ClusterError, Connector, Probe};
use super::jobs::RedisJobs;
use super::leader::{RedisLeadership, board_channel};
use super::limits::RedisLimits;
use super::link::{Link, Unavailable, events_channel};
use super::lock::RedisLock;
use super::permits::{Permits, RedisPermits};
use super::store::RedisStore;
use mdproxy_config::ClusterConfig;

/// How often a node whose Redis is away checks whether it is back.
const RETRY_EVERY: Duration = Duration::from_millis(500);
/// How often the subscription's connection is asked to answer: one gone
/// half-open is noticed within this and `cluster.timeout_ms`.
const PROBE_EVERY: Duration = Duration::from_secs(5);

/// One node's membership in the cluster. Cheap to clone.
#[derive(Clone)]
pub struct Cluster {
    link: Link,
    /// Makes the connections (`None` in unit tests, whose connection is scripted).
    connector: Option<Arc<Connector>>,
    pub(super) store: Arc<RedisStore>,
    pub(super) lock: Arc<RedisLock>,
    pub(super) permits: Arc<RedisPermits>,
    pub(super) limits: Arc<RedisLimits>,
    pub(super) jobs: Arc<RedisJobs>,
    pub(super) leadership: Arc<RedisLeadership>,
    pub(super) agents: Arc<RedisAgentSessions>,
}

impl Cluster {
    /// Connects in the background as a task of `tracker` (until `stop`): the node
    /// starts at once and joins when Redis answers. `purge_mark` is a file that
    /// keeps where the node stands in the purge log across restarts (in its disk
    /// tier's directory: what was purged while it was down reaches its disk).
    ///
    /// # Errors
    /// When `redis_url` is not a URL this build can connect to.
    pub fn start(
        config: &ClusterConfig,
        tracker: &TaskTracker,
        stop: CancellationToken,
        purge_mark: Option<PathBuf>,
    ) -> Result<Cluster, ClusterError> {
        let connector = Connector::new(config)?;
        let node_id = if config.node_id.is_empty() {
            default_node_id()
        } else {
            config.node_id.clone()
        };
        let link = Link::new(
            node_id,
            Duration::from_millis(config.timeout_ms),
            config.is_redis_cluster(),
        );
        link.expect_nodes(config.expected_nodes);
        let cluster = Cluster::on(link, Some(connector), config.max_l2_body_bytes, purge_mark);
        let watcher = cluster.clone();
        let watch_stop = stop.clone();
        tracker.spawn(async move { watcher.watch(watch_stop).await });
        let beating = cluster.link.clone();
        tracker.spawn(async move { beating.heartbeat(stop).await });
        Ok(cluster)
    }

    fn on(
        link: Link,
        connector: Option<Connector>,
        max_body: usize,
        purge_mark: Option<PathBuf>,
    ) -> Cluster {
        Cluster {
            connector: connector.map(Arc::new),
            store: Arc::new(RedisStore::new(link.clone(), max_body, purge_mark)),
            lock: Arc::new(RedisLock::new(link.clone())),
            permits: Arc::new(RedisPermits::new(link.clone())),
            limits: Arc::new(RedisLimits::new(link.clone())),
            jobs: Arc::new(RedisJobs::new(link.clone())),
            leadership: Arc::new(RedisLeadership::new(link.clone())),
            agents: Arc::new(RedisAgentSessions::new(link.clone())),
            link,
        }
    }

    /// This node's name in the cluster.
    pub fn node_id(&self) -> &str {
        self.link.node_id()
    }

    /// Whether Redis answers (false: the node works alone).
    pub fn is_up(&self) -> bool {
        self.link.is_up()
    }

    /// `host:port` of the Redis in use, or last used (empty before the first).
    pub fn redis_address(&self) -> String {
        self.link.redis_address()
    }

    /// Times the master was found at another address than before (a failover
    /// the sentinels made).
    pub fn failovers(&self) -> u64 {
        self.link.failovers()
    }

    /// Time this node has spent without Redis since it started (the wait for the
    /// first answer included).
    pub fn alone_for(&self) -> Duration {
        self.link.alone_for()
    }

    /// Attempts to connect to Redis, and sessions with it, that ended in an error
    /// (a refused connection, a failed handshake, a dropped link).
    pub fn failed_sessions(&self) -> u64 {
        self.link.failed_sessions()
    }

    /// Nodes seen alive recently (this one included; `cluster.expected_nodes`
    /// before Redis answered).
    pub fn nodes(&self) -> u64 {
        self.link.nodes()
    }

    /// The part of the upstream budget the fleet's bucket gives out now (see
    /// [`Permits::fleet_share`]).
    pub fn budget_share(&self) -> f64 {
        self.permits.fleet_share()
    }

    /// Commands Redis refused to this node's ACL user (`NOPERM`) so far.
    pub fn refusals(&self) -> u64 {
        self.link.refusals()
    }

    /// Answers this node found in the shared store.
    pub fn shared_hits(&self) -> u64 {
        self.store.shared_hits()
    }

    /// How long `target` is still paused for the fleet, if it is.
    ///
    /// # Errors
    /// [`Unavailable`] when Redis is away or slow.
    pub async fn paused_for(&self, target: &str) -> Result<Option<Duration>, Unavailable> {
        self.limits.paused_for(target).await
    }

    /// Keeps the data connection and the event subscription up: connects, reads
    /// publications until the connection drops, and tries again every
    /// [`RETRY_EVERY`] while Redis is away. A node that cannot reach Redis at start
    /// says so once (why, never the URL).
    async fn watch(&self, stop: CancellationToken) {
        let Some(connector) = &self.connector else {
            return;
        };
        let mut first = true;
        loop {
            let session = async {
                let channels = [events_channel(), board_channel()];
                let channels: Vec<&str> = channels.iter().map(String::as_str).collect();
                let session = connector.connect(&channels).await?;
                first = false;
                // A new subscription may follow a Redis that lost its data: take the
                // next leader's board whatever its term.
                self.leadership.forget_term();
                self.link.publish_sharded(session.sharded_pubsub);
                if self.link.joined(session.conn, session.address) {
                    tracing::info!(node = %self.node_id(), redis = %self.redis_address(), "Redis reachable: this node shares its cache with the cluster");
                }
                self.link.beat().await;
                self.limits.recall_pauses().await;
                self.store.rejoined().await;
                self.listen(session.messages, session.probe).await;
                Ok::<(), redis::RedisError>(())
            };
            let ended = tokio::select! {
                ended = session => ended,
                () = stop.cancelled() => return,
            };
            let why = match ended {
                Ok(()) => "the event subscription ended".to_owned(),
                Err(e) => {
                    self.link.session_failed();
                    e.to_string()
                }
            };
            if first {
                // Never up yet: `went_away` would stay silent (it speaks on a change).
                first = false;
                tracing::warn!(node = %self.node_id(), reason = why, "Redis unreachable at start: this node works alone until it answers");
            }
            self.link.went_away(&why);
            tokio::select! {
                () = tokio::time::sleep(RETRY_EVERY) => {}
                () = stop.cancelled() => return,
            }
        }
    }

    /// Takes in the publications of `messages` until they end, or until `probe`
    /// finds their connection silent (asked every [`PROBE_EVERY`]); meanwhile,
    /// while Redis is marked away (a slow answer, with the subscription still up),
    /// asks every [`RETRY_EVERY`] whether it answers again, or, where the master
    /// may have moved (sentinels), ends the session so the next asks the sentinels.
    async fn listen(
        &self,
        messages: impl futures_util::Stream<Item = redis::Msg>,
        probe: Option<Probe>,
    ) {
        tokio::pin!(messages);
        let mut check = tokio::time::interval(RETRY_EVERY);
        check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut probe_due =
            tokio::time::interval_at(tokio::time::Instant::now() + PROBE_EVERY, PROBE_EVERY);
        probe_due.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // The probe's question in flight, if one is, and the purge log's newest
        // entry read before it was asked: heard once the subscription answers.
        let mut asked: Option<BoxFuture<'static, redis::RedisResult<()>>> = None;
        let mut mark: Option<String> = None;
        let board = board_channel();
        loop {
            tokio::select! {
                message = messages.next() => {
                    let Some(message) = message else { return };
                    self.take(&message, &board);
                }
                // Always polled: the away mark is set by other tasks, which do not
                // wake this one (a guard `if !self.is_up()` here was evaluated only
                // when a publication woke the loop, so a quiet node stayed alone).
                _ = check.tick() => {
                    if !self.is_up() {
                        if self.connector.as_deref().is_some_and(Connector::follows_failover) {
                            return;
                        }
                        if self.link.rejoin_if_answering().await {
                            tracing::info!(node = %self.node_id(), "Redis answers again: this node shares its cache with the cluster");
                            self.store.rejoined().await;
                        }
                    }
                }
                _ = probe_due.tick(), if asked.is_none() => {
                    match &probe {
                        Some(ask) => {
                            mark = self.store.newest_logged().await;
                            asked = Some(ask());
                        }
                        // A Redis Cluster's pushes come on another shard's
                        // connection than the log's commands, in no order with
                        // them: what was read a probe ago is heard now, after
                        // the pushes that arrived meanwhile.
                        None => {
                            if !self.take_ready(&mut messages, &board) {
                                return;
                            }
                            if let Some(newest) = mark.take() {
                                self.store.heard_up_to(newest);
                            }
                            mark = self.store.newest_logged().await;
                        }
                    }
                }
                answer = async { asked.as_mut().expect("polled only when asked").await }, if asked.is_some() => {
                    asked = None;
                    if let Err(e) = answer {
                        tracing::warn!(node = %self.node_id(), error = %e, "the event subscription's connection does not answer: subscribing again");
                        return;
                    }
                    // Every purge logged before the question was published before
                    // it: its message came ahead of the answer on this connection,
                    // though the client hands the two over apart (the answer may
                    // be read first): what it holds is taken in before.
                    if !self.take_ready(&mut messages, &board) {
                        return;
                    }
                    if let Some(newest) = mark.take() {
                        self.store.heard_up_to(newest);
                    }
                }
            }
        }
    }

    /// One publication: a hub board, or an event.
    fn take(&self, message: &redis::Msg, board: &str) {
        if message.get_channel_name() == board {
            self.leadership.heard_board(message.get_payload_bytes());
        } else {
            self.on_event(message.get_payload_bytes());
        }
    }

    /// Takes in the publications `messages` holds already, without waiting;
    /// false when they ended (the stream is not asked again).
    fn take_ready(
        &self,
        messages: &mut std::pin::Pin<&mut impl futures_util::Stream<Item = redis::Msg>>,
        board: &str,
    ) -> bool {
        loop {
            match messages.next().now_or_never() {
                Some(Some(message)) => self.take(&message, board),
                Some(None) => return false,
                None => return true,
            }
        }
    }

    /// One publication on the events channel: `<kind> <rest>`.
    fn on_event(&self, payload: &[u8]) {
        let Ok(text) = std::str::from_utf8(payload) else {
            return;
        };
        match text.split_once(' ') {
            Some(("filled", key)) => self.lock.wake(key),
            Some(("purge", what)) => self.store.purged(what),
            Some((kind, rest)) => self.limits.heard(kind, rest),
            None => {}
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::link::mock;
    use crate::lock::FillLock;
    use crate::store::SharedStore;
    use redis_test::MockCmd;

    fn on_mock(commands: Vec<MockCmd>) -> Cluster {
        Cluster::on(Link::on_mock(commands), None, 1 << 20, None)
    }

    /// A node that starts while Redis is away counts the nodes its configuration
    /// expects, so that it takes that share of the upstream budget, not the whole
    /// of it. Redis here is a socket that never answers.
    #[tokio::test]
    async fn a_node_that_never_reached_redis_counts_the_expected_nodes() {
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let config = ClusterConfig {
            redis_url: mdproxy_config::Secret::new(format!(
                "redis://{}/0",
                silent.local_addr().unwrap()
            )),
            expected_nodes: 3,
            ..ClusterConfig::default()
        };
        let (tracker, stop) = (TaskTracker::new(), CancellationToken::new());
        let cluster = Cluster::start(&config, &tracker, stop.clone(), None).unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!cluster.is_up());
        assert_eq!(cluster.nodes(), 3);
        stop.cancel();
        tracker.close();
        tokio::time::timeout(Duration::from_secs(10), tracker.wait())
            .await
            .expect("the cluster's tasks stop");
    }

    /// Publications are routed to their part: fills wake waiters, purges reach the
    /// cache, unknown kinds and bytes are ignored.
    #[tokio::test]
    async fn events_reach_their_part() {
        let cluster = on_mock(vec![]);
        let mut purged = cluster.store.invalidations();
        let waiter = cluster.lock.waiter("/k");
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
        let cluster = on_mock(vec![
            mock::failing(redis::cmd("GET").arg("x").clone()),
            MockCmd::new(redis::cmd("PING"), Ok("PONG")),
            // Back: where the purge log stands (the first look).
            crate::purges::mock::none_logged(),
        ]);
        // The watcher's loop on a subscription where nothing is ever published,
        // entered while Redis is up.
        let quiet = futures_util::stream::pending::<redis::Msg>();
        let watching = cluster.clone();
        let task = tokio::spawn(async move { watching.listen(quiet, None).await });
        tokio::time::sleep(RETRY_EVERY * 2).await;
        let _ = cluster
            .link
            .run(|mut c| async move { redis::cmd("GET").arg("x").query_async::<i64>(&mut c).await })
            .await;
        assert!(!cluster.is_up());
        tokio::time::sleep(RETRY_EVERY * 3).await;
        assert!(cluster.is_up(), "still alone after three re-check periods");
        task.abort();
    }

    /// Defect: a subscription whose connection went half-open (Redis's host gone
    /// without a FIN or RST) delivered nothing and said nothing: purges and the
    /// leader's board were lost until the kernel gave up on the socket, which it
    /// need never do on an idle one. The listener asks the connection every
    /// [`PROBE_EVERY`] and subscribes again when it does not answer; while it
    /// answers, a quiet subscription is kept. Time is paused.
    #[tokio::test(start_paused = true)]
    async fn a_subscription_that_stops_answering_is_left() {
        // Before each question the purge log's newest entry is read: 19 of them
        // in 20 probe periods, then 1 before the silent one.
        let cluster = on_mock(
            (0..20)
                .map(|_| crate::purges::mock::none_logged())
                .collect(),
        );
        let answering: Probe = Box::new(|| Box::pin(async { Ok(()) }));
        let quiet = futures_util::stream::pending::<redis::Msg>();
        let kept = tokio::time::timeout(
            PROBE_EVERY * 20 - Duration::from_millis(1),
            cluster.listen(quiet, Some(answering)),
        );
        assert!(kept.await.is_err(), "an answering subscription is kept");
        assert!(cluster.is_up(), "every command was the one expected");

        let asked = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = Arc::clone(&asked);
        let silent: Probe = Box::new(move || {
            counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Box::pin(async {
                tokio::time::sleep(Duration::from_secs(1)).await;
                Err(redis::RedisError::from((
                    redis::ErrorKind::IoError,
                    "no answer",
                )))
            })
        });
        let quiet = futures_util::stream::pending::<redis::Msg>();
        let left = tokio::time::timeout(PROBE_EVERY * 2, cluster.listen(quiet, Some(silent)));
        assert!(left.await.is_ok(), "a silent subscription is left");
        assert_eq!(asked.load(std::sync::atomic::Ordering::Relaxed), 1);
    }
}
