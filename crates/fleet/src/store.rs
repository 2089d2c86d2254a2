//! The shared store of answers in Redis (bytes by key, each with its expiry) and
//! purges that reach it and every node: one key, or every key a prefix and a
//! predicate select (found by `SCAN`, so no node needs to hold them). What an entry
//! holds, and what a purge's message means, is the cache's business.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use tokio::sync::broadcast;

use super::conn::Scan;
use super::link::{Link, PREFIX, Unavailable};
use super::purges::{PurgeLog, Unsent};

/// The shared second-level store of answers (bytes by key) and cluster-wide purges.
#[async_trait]
pub trait SharedStore: Send + Sync {
    /// Whether the other nodes can be reached now (false: every call is skipped
    /// or fails at once).
    fn is_up(&self) -> bool;

    /// Largest body shared; larger ones stay in the node's cache.
    fn max_body(&self) -> usize;

    /// The answer stored under `key`, if any.
    ///
    /// # Errors
    /// [`Unavailable`] when the store is away or slow.
    async fn get(&self, key: &str) -> Result<Option<Bytes>, Unavailable>;

    /// Stores `value` under `key` for `ttl` (unless larger than [`max_body`](Self::max_body)).
    async fn put(&self, key: &str, value: Bytes, ttl: Duration);

    /// Drops `key` from the store and tells every node (`message` is what their
    /// [`invalidations`](Self::invalidations) receive).
    async fn purge(&self, key: &str, message: &str);

    /// Drops every stored key that starts with one of `prefixes` and that `matches`
    /// accepts, and tells every node once (`message`, as [`purge`](Self::purge)).
    async fn purge_matching(
        &self,
        prefixes: &[&str],
        matches: &(dyn for<'k> Fn(&'k str) -> bool + Sync),
        message: &str,
    );

    /// Purges made anywhere (this node's too), as their messages; in order, and
    /// among them messages that name no purge (`heard <entry>`), which the
    /// application hands back to [`applied`](Self::applied) once it has applied
    /// every message before them.
    fn invalidations(&self) -> broadcast::Receiver<String>;

    /// The application applied `message` of [`invalidations`](Self::invalidations)
    /// and every one before it.
    async fn applied(&self, _message: &str) {}
}

/// The head of a message of [`SharedStore::invalidations`] that names the purge
/// log's entry up to which what came before it was heard.
const HEARD: &str = "heard ";

/// The store on Redis, and what it keeps on this node.
pub struct RedisStore {
    link: Link,
    max_body: usize,
    /// Answers found in the shared store.
    shared_hits: AtomicU64,
    /// Purges made anywhere (their messages): the application drops those keys
    /// from its own cache.
    invalidations: broadcast::Sender<String>,
    /// The first receiver, made with the channel and handed to the first caller
    /// of [`SharedStore::invalidations`]: what a first session with Redis catches
    /// up on before the application listens waits for it there.
    first: std::sync::Mutex<Option<broadcast::Receiver<String>>>,
    /// Purges logged for the nodes that miss their publication, and this node's
    /// that did not reach Redis.
    log: PurgeLog,
}

impl RedisStore {
    /// The store on `link`, answers up to `max_body`; `mark` keeps where this
    /// node stands in the purge log across restarts.
    pub(super) fn new(link: Link, max_body: usize, mark: Option<PathBuf>) -> RedisStore {
        let (invalidations, first) = broadcast::channel(1024);
        RedisStore {
            link: link.clone(),
            max_body,
            shared_hits: AtomicU64::new(0),
            invalidations,
            first: std::sync::Mutex::new(Some(first)),
            log: PurgeLog::new(link, mark),
        }
    }

    /// Deletes every stored key under `prefix` that `matches` accepts, round by
    /// round (through every master of a Redis Cluster): Redis is never held for the
    /// whole keyspace, and each round has the operations' time limit.
    ///
    /// # Errors
    /// A round that failed (Redis is away): the scan ends there.
    async fn delete_matching(
        &self,
        prefix: &str,
        matches: &(dyn for<'k> Fn(&'k str) -> bool + Sync),
    ) -> Result<(), Unavailable> {
        let pattern = pattern(prefix);
        let entries = entry_prefix();
        let mut scan = Scan::default();
        loop {
            let keys = self
                .link
                .scan(&mut scan, &pattern)
                .await
                .map_err(|_| Unavailable)?;
            let doomed: Vec<String> = keys
                .into_iter()
                .filter(|k| k.strip_prefix(&entries).is_some_and(matches))
                .collect();
            if !doomed.is_empty() {
                self.delete(doomed).await.map_err(|_| Unavailable)?;
            }
            if scan.is_done() {
                return Ok(());
            }
        }
    }

    /// [`delete_matching`](Self::delete_matching) under each of `prefixes` in
    /// turn; false at the first that Redis did not finish.
    async fn delete_under(
        &self,
        prefixes: &[impl AsRef<str> + Sync],
        matches: &(dyn for<'k> Fn(&'k str) -> bool + Sync),
    ) -> bool {
        for prefix in prefixes {
            if self
                .delete_matching(prefix.as_ref(), matches)
                .await
                .is_err()
            {
                return false;
            }
        }
        true
    }

    /// A purge announced on the events channel (or read from the log). One that
    /// looks like this node's own mark of what it heard is nobody's purge, and
    /// must not move that mark: it is dropped.
    pub(super) fn purged(&self, message: &str) {
        if message.starts_with(HEARD) {
            return;
        }
        let _ = self.invalidations.send(message.to_owned());
    }

    /// Publishes `message`, then logs it; false when Redis did not take both.
    /// Published first: an entry a node finds in the log was published before, so
    /// the newest entry a node reads before asking its subscription to answer
    /// ([`newest_logged`](Self::newest_logged)) never covers a publication still
    /// to come.
    async fn announce(&self, message: &str) -> bool {
        self.link.publish(format!("purge {message}")).await.is_ok()
            && self.log.append(message).await.is_ok()
    }

    /// Drops what `purge` names from the shared store and tells every node;
    /// false when Redis did not take all of it.
    async fn send(&self, purge: &Unsent) -> bool {
        let dropped = match purge {
            Unsent::Key { key, .. } => self.delete(vec![entry_key(key)]).await.is_ok(),
            Unsent::Prefixes { prefixes, .. } => self.delete_under(prefixes, &|_| true).await,
        };
        let (Unsent::Key { message, .. } | Unsent::Prefixes { message, .. }) = purge;
        dropped && self.announce(message).await
    }

    /// What a new session with Redis (or Redis answering again) owes this node:
    /// the purges logged while it was not subscribed, handed on as if heard, then
    /// its own purges that did not reach Redis, sent.
    pub(super) async fn rejoined(&self) {
        let Ok(missed) = self.log.missed().await else {
            return;
        };
        if missed.unplaced {
            // Its disk may hold what was purged before it kept a place: dropped
            // once (on a first start the disk is empty, and this costs nothing).
            tracing::info!(
                "this node keeps no place in the purge log yet (a first start with its disk tier, or the file was lost): its cache is dropped"
            );
            self.purged("prefix /");
        } else if missed.gap {
            // Purges may have been made that no entry names any more: every
            // catalogue key this node holds is dropped.
            tracing::warn!(
                "the purge log no longer reaches back to what this node last heard: its cache is dropped"
            );
            self.purged("prefix /");
        }
        if !missed.messages.is_empty() {
            tracing::info!(
                purges = missed.messages.len(),
                "purges made while this node was not subscribed: applied"
            );
        }
        for message in &missed.messages {
            self.purged(message);
        }
        if let Some(heard) = self.log.heard_last() {
            self.keep_when_applied(heard);
        }
        let mut unsent = self.log.take_unsent().into_iter();
        let mut sent = 0;
        for purge in unsent.by_ref() {
            if !self.send(&purge).await {
                let mut back = vec![purge];
                back.extend(unsent);
                self.log.put_back(back);
                break;
            }
            sent += 1;
        }
        if sent > 0 {
            tracing::info!(
                purges = sent,
                "purges made while Redis was away: sent to the fleet"
            );
        }
    }

    /// The newest entry of the purge log now, to be marked heard once the
    /// subscription answers after it ([`heard_up_to`](Self::heard_up_to)).
    pub(super) async fn newest_logged(&self) -> Option<String> {
        self.log.newest().await.ok()
    }

    /// Notes that every purge logged up to `id` was heard.
    pub(super) fn heard_up_to(&self, id: String) {
        self.log.heard_up_to(id.clone());
        self.keep_when_applied(id);
    }

    /// Has the purge log's place `id` kept across restarts once the application
    /// applied what was handed to it before: a message after those, which it
    /// hands back to [`SharedStore::applied`] when it gets there.
    fn keep_when_applied(&self, id: String) {
        if self.log.is_marked() {
            let _ = self.invalidations.send(format!("{HEARD}{id}"));
        }
    }

    /// Answers this node found in the shared store.
    pub fn shared_hits(&self) -> u64 {
        self.shared_hits.load(Ordering::Relaxed)
    }

    async fn delete(&self, redis_keys: Vec<String>) -> Result<(), Unavailable> {
        self.link
            .run(|mut c| async move {
                redis::cmd("DEL")
                    .arg(&redis_keys)
                    .query_async::<i64>(&mut c)
                    .await
            })
            .await
            .map(drop)
    }
}

fn entry_prefix() -> String {
    format!("{PREFIX}:entry:")
}

fn entry_key(key: &str) -> String {
    format!("{PREFIX}:entry:{key}")
}

/// `prefix` as a `SCAN MATCH` pattern of the keys it starts (glob characters
/// escaped).
fn pattern(prefix: &str) -> String {
    let mut out = entry_prefix();
    for c in prefix.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('*');
    out
}

#[async_trait]
impl SharedStore for RedisStore {
    fn is_up(&self) -> bool {
        self.link.is_up()
    }

    fn max_body(&self) -> usize {
        self.max_body
    }

    async fn get(&self, key: &str) -> Result<Option<Bytes>, Unavailable> {
        let redis_key = entry_key(key);
        let found: Option<Vec<u8>> = self
            .link
            .run(|mut c| async move { redis::cmd("GET").arg(&redis_key).query_async(&mut c).await })
            .await?;
        if found.is_some() {
            self.shared_hits.fetch_add(1, Ordering::Relaxed);
        }
        Ok(found.map(Bytes::from))
    }

    async fn put(&self, key: &str, value: Bytes, ttl: Duration) {
        if value.len() > self.max_body {
            return;
        }
        let (redis_key, ms) = (entry_key(key), ttl.as_millis().max(1) as u64);
        let _ = self
            .link
            .run(|mut c| async move {
                redis::cmd("SET")
                    .arg(&redis_key)
                    .arg(value.as_ref())
                    .arg("PX")
                    .arg(ms)
                    .query_async::<()>(&mut c)
                    .await
            })
            .await;
    }

    async fn purge(&self, key: &str, message: &str) {
        let purge = Unsent::Key {
            key: key.to_owned(),
            message: message.to_owned(),
        };
        if !self.send(&purge).await {
            self.log.keep(purge);
        }
    }

    async fn purge_matching(
        &self,
        prefixes: &[&str],
        matches: &(dyn for<'k> Fn(&'k str) -> bool + Sync),
        message: &str,
    ) {
        if !(self.delete_under(prefixes, matches).await && self.announce(message).await) {
            self.log.keep(Unsent::Prefixes {
                prefixes: prefixes.iter().map(|p| (*p).to_owned()).collect(),
                message: message.to_owned(),
            });
        }
    }

    fn invalidations(&self) -> broadcast::Receiver<String> {
        let first = self.first.lock().unwrap_or_else(|e| e.into_inner()).take();
        first.unwrap_or_else(|| self.invalidations.subscribe())
    }

    async fn applied(&self, message: &str) {
        if let Some(id) = message.strip_prefix(HEARD) {
            self.log.applied_up_to(id).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::link::{SCAN_COUNT, mock};
    use crate::purges::mock as purges_mock;
    use redis::Value;
    use redis_test::MockCmd;

    fn on_mock(commands: Vec<MockCmd>) -> RedisStore {
        RedisStore::new(Link::on_mock(commands), 1 << 20, None)
    }

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    fn scan(cursor: u64, pattern: &str) -> redis::Cmd {
        let mut cmd = redis::cmd("SCAN");
        cmd.arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(SCAN_COUNT);
        cmd
    }

    fn published(message: &str) -> MockCmd {
        MockCmd::new(
            redis::cmd("PUBLISH")
                .arg("mdproxy:v1:events")
                .arg(message)
                .clone(),
            Ok(2),
        )
    }

    /// A stored answer is found and counted; a miss is not; a body too large for
    /// the store is never sent.
    #[tokio::test]
    async fn get_counts_shared_hits_and_put_keeps_large_bodies_local() {
        let key = "mdproxy:v1:entry:/market/indices";
        let store = on_mock(vec![
            MockCmd::new(redis::cmd("GET").arg(key).clone(), Ok(Value::Nil)),
            MockCmd::new(redis::cmd("GET").arg(key).clone(), Ok(bulk("body"))),
            MockCmd::new(
                redis::cmd("SET")
                    .arg(key)
                    .arg("ok")
                    .arg("PX")
                    .arg(1_500)
                    .clone(),
                Ok("OK"),
            ),
        ]);
        assert_eq!(store.get("/market/indices").await, Ok(None));
        assert_eq!(
            store.get("/market/indices").await,
            Ok(Some(Bytes::from_static(b"body")))
        );
        assert_eq!(store.shared_hits(), 1);
        let large = Bytes::from(vec![0; store.max_body() + 1]);
        store
            .put("/market/indices", large, Duration::from_secs(1))
            .await;
        store
            .put(
                "/market/indices",
                Bytes::from_static(b"ok"),
                Duration::from_millis(1_500),
            )
            .await;
        assert!(store.link.is_up(), "every command was the one expected");
    }

    /// A purge by prefix finds the stored keys round by round (none of them need be
    /// held by this node), drops those the predicate accepts, and tells every node.
    #[tokio::test]
    async fn a_purge_by_prefix_scans_redis_and_tells_every_node() {
        let pattern = "mdproxy:v1:entry:/stock/*";
        let store = on_mock(vec![
            MockCmd::new(
                scan(0, pattern),
                Ok(Value::Array(vec![
                    bulk("17"),
                    Value::Array(vec![
                        bulk("mdproxy:v1:entry:/stock/detail/600519"),
                        bulk("mdproxy:v1:entry:/stock/kline?code=1"),
                    ]),
                ])),
            ),
            MockCmd::new(
                redis::cmd("DEL")
                    .arg(&["mdproxy:v1:entry:/stock/detail/600519"])
                    .clone(),
                Ok(1),
            ),
            MockCmd::new(
                scan(17, pattern),
                Ok(Value::Array(vec![bulk("0"), Value::Array(vec![])])),
            ),
            published("purge endpoint /stock/detail/{code}"),
            purges_mock::logged("endpoint /stock/detail/{code}"),
        ]);
        let mut heard = store.invalidations();
        store
            .purge_matching(
                &["/stock/"],
                &|k: &str| k.starts_with("/stock/detail/"),
                "endpoint /stock/detail/{code}",
            )
            .await;
        assert!(store.link.is_up(), "every command was the one expected");
        // The publication comes back through the subscription, to this node too.
        store.purged("endpoint /stock/detail/{code}");
        assert_eq!(heard.try_recv().unwrap(), "endpoint /stock/detail/{code}");
    }

    /// Glob characters in a prefix are matched literally.
    #[test]
    fn a_prefix_is_matched_literally() {
        assert_eq!(
            pattern("/a*b?[c]\\"),
            "mdproxy:v1:entry:/a\\*b\\?\\[c\\]\\\\*"
        );
    }

    /// Redis away in the middle of a purge: the scan stops, nothing hangs, and the
    /// purge is kept. When Redis answers again the node first applies what was
    /// logged while it was not subscribed, then sends its own purges: the shared
    /// store's keys dropped (every key under the prefix), logged, published.
    #[tokio::test]
    async fn a_purge_made_while_redis_is_away_is_sent_when_it_is_back() {
        let store = on_mock(vec![
            // The first session notes where the log stands.
            purges_mock::none_logged(),
            mock::failing(scan(0, "mdproxy:v1:entry:/x*")),
            MockCmd::new(redis::cmd("PING"), Ok("PONG")),
            MockCmd::new(
                redis::cmd("XRANGE")
                    .arg("mdproxy:v1:purges")
                    .arg("0-0")
                    .arg("+")
                    .arg("COUNT")
                    .arg(1_000)
                    .clone(),
                Ok(Value::Array(vec![purges_mock::entry("3-0", "key /y")])),
            ),
            MockCmd::new(
                scan(0, "mdproxy:v1:entry:/x*"),
                Ok(Value::Array(vec![
                    bulk("0"),
                    Value::Array(vec![bulk("mdproxy:v1:entry:/x/1")]),
                ])),
            ),
            MockCmd::new(
                redis::cmd("DEL").arg(&["mdproxy:v1:entry:/x/1"]).clone(),
                Ok(1),
            ),
            published("purge prefix /x"),
            purges_mock::logged("prefix /x"),
        ]);
        store.rejoined().await;
        store
            .purge_matching(&["/x"], &|k: &str| k.ends_with("/2"), "prefix /x")
            .await;
        assert!(!store.link.is_up());
        let mut heard = store.invalidations();
        assert!(store.link.rejoin_if_answering().await);
        store.rejoined().await;
        assert_eq!(heard.try_recv().unwrap(), "key /y", "missed, then applied");
        assert!(store.link.is_up(), "every command was the one expected");
        assert!(store.log.take_unsent().is_empty(), "sent");
    }

    /// A node with a mark hands what it caught up on to the application, then a
    /// `heard` message after it; the mark moves only when that message comes back
    /// applied. A purge message that looks like one is nobody's purge.
    #[tokio::test]
    async fn the_mark_moves_once_what_came_before_is_applied() {
        let dir = std::env::temp_dir().join(format!("store-mark-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("purge-log-mark");
        std::fs::write(&path, "5-1\n").unwrap();
        let range = redis::cmd("XRANGE")
            .arg("mdproxy:v1:purges")
            .arg("5-1")
            .arg("+")
            .arg("COUNT")
            .arg(1_000)
            .clone();
        let store = RedisStore::new(
            Link::on_mock(vec![MockCmd::new(
                range,
                Ok(Value::Array(vec![
                    purges_mock::entry("5-1", "key /a"),
                    purges_mock::entry("6-0", "key /b"),
                ])),
            )]),
            1 << 20,
            Some(path.clone()),
        );
        let mut heard = store.invalidations();
        store.rejoined().await;
        store.purged("heard 9-0");
        assert_eq!(heard.try_recv().unwrap(), "key /b");
        assert_eq!(
            heard.try_recv().unwrap(),
            "heard 6-0",
            "after what it covers"
        );
        assert!(heard.try_recv().is_err(), "a look-alike is dropped");
        let held = || std::fs::read_to_string(&path).unwrap();
        store.applied("key /b").await;
        assert_eq!(held(), "5-1\n", "not before it comes back");
        store.applied("heard 6-0").await;
        assert_eq!(held(), "6-0\n");
        assert!(store.link.is_up(), "every command was the one expected");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
