//! The fleet's purge log: every purge is also appended to a Redis stream (about the
//! newest [`KEPT`]), so that a node which was not subscribed when a purge was
//! published (a Redis blip of its own, a subscription found silent) reads what it
//! missed when it subscribes again; and this node's purges that could not reach
//! Redis are kept (the newest [`MAX_UNSENT`]) to be sent once it answers again.

use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard};

use super::link::{Link, PREFIX, Unavailable};

/// Entries the log keeps, about (`MAXLEN ~`): a node away for more purges than
/// this misses the oldest of them.
const KEPT: usize = 10_000;
/// This node's purges kept while Redis is away; past it the oldest is dropped.
pub(crate) const MAX_UNSENT: usize = 1_000;
/// Entries read at a time when catching up.
const PAGE: usize = 1_000;
/// Pages read at most in one catch-up (the log keeps about [`KEPT`]).
const MAX_PAGES: usize = 100;

/// What a node missed while it was not subscribed.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Missed {
    /// The purges logged since it last heard, oldest first.
    pub(crate) messages: Vec<String>,
    /// The log no longer holds the entry it last heard (trimmed, or Redis lost
    /// its data): purges may have been missed that no entry names.
    pub(crate) gap: bool,
}

/// The stream's key.
fn log_key() -> String {
    format!("{PREFIX}:purges")
}

/// A purge of this node that did not reach Redis: what to drop from the shared
/// store, and the message that tells the other nodes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Unsent {
    /// One key.
    Key { key: String, message: String },
    /// Every key under these prefixes (the purge's finer predicate is not kept:
    /// sent late, it drops all of them from the shared store, which costs misses,
    /// never a purged answer served).
    Prefixes {
        prefixes: Vec<String>,
        message: String,
    },
}

/// The log on Redis, and what this node knows of it.
pub(crate) struct PurgeLog {
    link: Link,
    /// The newest entry known heard here (by the subscription, or read from the
    /// log); `None` until the first session.
    heard: Mutex<Option<String>>,
    /// This node's purges that did not reach Redis, oldest first.
    unsent: Mutex<VecDeque<Unsent>>,
}

impl PurgeLog {
    pub(crate) fn new(link: Link) -> PurgeLog {
        PurgeLog {
            link,
            heard: Mutex::default(),
            unsent: Mutex::default(),
        }
    }

    fn heard(&self) -> MutexGuard<'_, Option<String>> {
        self.heard.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn unsent(&self) -> MutexGuard<'_, VecDeque<Unsent>> {
        self.unsent.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Appends `message` to the log.
    ///
    /// # Errors
    /// [`Unavailable`] when Redis is away or slow.
    pub(crate) async fn append(&self, message: &str) -> Result<(), Unavailable> {
        let key = log_key();
        self.link
            .run(|mut c| async move {
                redis::cmd("XADD")
                    .arg(&key)
                    .arg("MAXLEN")
                    .arg("~")
                    .arg(KEPT)
                    .arg("*")
                    .arg("m")
                    .arg(message)
                    .query_async::<String>(&mut c)
                    .await
            })
            .await
            .map(drop)
    }

    /// The newest entry of the log ("0-0" when it is empty).
    ///
    /// # Errors
    /// [`Unavailable`] when Redis is away or slow.
    pub(crate) async fn newest(&self) -> Result<String, Unavailable> {
        let key = log_key();
        let newest: Vec<(String, Vec<String>)> = self
            .link
            .run(|mut c| async move {
                redis::cmd("XREVRANGE")
                    .arg(&key)
                    .arg("+")
                    .arg("-")
                    .arg("COUNT")
                    .arg(1)
                    .query_async(&mut c)
                    .await
            })
            .await?;
        Ok(newest
            .into_iter()
            .next()
            .map_or_else(|| "0-0".into(), |(id, _)| id))
    }

    /// Notes that every entry up to `id` was heard (the subscription was known up
    /// after `id` was read): the next catch-up reads from there.
    pub(crate) fn heard_up_to(&self, id: String) {
        *self.heard() = Some(id);
    }

    /// Notes that every entry logged so far was heard.
    ///
    /// # Errors
    /// [`Unavailable`] when Redis is away or slow.
    pub(crate) async fn mark_heard(&self) -> Result<(), Unavailable> {
        let newest = self.newest().await?;
        self.heard_up_to(newest);
        Ok(())
    }

    /// The messages logged since the newest entry heard here, oldest first, and
    /// those counted as heard; and whether the log lost that entry meanwhile. The
    /// first call (no entry heard yet: the node's first session) only notes where
    /// the log stands.
    ///
    /// # Errors
    /// [`Unavailable`] when Redis is away or slow.
    pub(crate) async fn missed(&self) -> Result<Missed, Unavailable> {
        let Some(from) = self.heard().clone() else {
            self.mark_heard().await?;
            return Ok(Missed::default());
        };
        let mut missed = Missed::default();
        // From the entry heard itself: its absence says the log was cut.
        let mut start = from.clone();
        for page in 0..MAX_PAGES {
            let mut entries = self.range(&start).await?;
            let full = entries.len() == PAGE;
            if page == 0 && from != "0-0" {
                if entries.first().is_some_and(|(id, _)| *id == from) {
                    entries.remove(0);
                } else {
                    missed.gap = true;
                }
            }
            let Some((last, _)) = entries.last() else {
                break;
            };
            start = after(last);
            *self.heard() = Some(last.clone());
            missed.messages.extend(
                entries
                    .into_iter()
                    .filter_map(|(_, fields)| message_of(fields)),
            );
            if !full {
                break;
            }
        }
        Ok(missed)
    }

    /// One page of the log from `start` (inclusive).
    async fn range(&self, start: &str) -> Result<Vec<(String, Vec<String>)>, Unavailable> {
        let (key, start) = (log_key(), start.to_owned());
        self.link
            .run(|mut c| async move {
                redis::cmd("XRANGE")
                    .arg(&key)
                    .arg(&start)
                    .arg("+")
                    .arg("COUNT")
                    .arg(PAGE)
                    .query_async(&mut c)
                    .await
            })
            .await
    }

    /// Keeps a purge that did not reach Redis (the oldest dropped past
    /// [`MAX_UNSENT`]).
    pub(crate) fn keep(&self, purge: Unsent) {
        let mut unsent = self.unsent();
        if unsent.len() == MAX_UNSENT {
            unsent.pop_front();
            tracing::warn!(
                kept = MAX_UNSENT,
                "purges made while Redis is away: the oldest is dropped, and the other nodes will not hear of it"
            );
        }
        unsent.push_back(purge);
    }

    /// The purges kept, oldest first (taken: put back what could not be sent).
    pub(crate) fn take_unsent(&self) -> Vec<Unsent> {
        self.unsent().drain(..).collect()
    }

    /// Puts back `purges` not sent again, ahead of any kept meanwhile.
    pub(crate) fn put_back(&self, purges: Vec<Unsent>) {
        let mut unsent = self.unsent();
        for purge in purges.into_iter().rev() {
            unsent.push_front(purge);
        }
        unsent.truncate(MAX_UNSENT);
    }
}

/// The first ID after `id` (`ms-seq`): XRANGE's start is inclusive, and its
/// exclusive form needs Redis 6.2.
fn after(id: &str) -> String {
    match id.split_once('-').map(|(ms, seq)| (ms, seq.parse::<u64>())) {
        Some((ms, Ok(seq))) if seq < u64::MAX => format!("{ms}-{}", seq + 1),
        _ => id.to_owned(),
    }
}

/// The message of a log entry's fields (`m <message>`).
fn message_of(fields: Vec<String>) -> Option<String> {
    let mut fields = fields.into_iter();
    while let (Some(name), Some(value)) = (fields.next(), fields.next()) {
        if name == "m" {
            return Some(value);
        }
    }
    None
}

/// The log's commands as the unit tests of the parts that use it script them.
#[cfg(test)]
pub(crate) mod mock {
    use redis::Value;
    use redis_test::MockCmd;

    pub(crate) fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    /// An entry of the log as `XRANGE` answers it.
    pub(crate) fn entry(id: &str, message: &str) -> Value {
        Value::Array(vec![bulk(id), Value::Array(vec![bulk("m"), bulk(message)])])
    }

    /// The question for the newest entry.
    pub(crate) fn newest() -> redis::Cmd {
        redis::cmd("XREVRANGE")
            .arg("mdproxy:v1:purges")
            .arg("+")
            .arg("-")
            .arg("COUNT")
            .arg(1)
            .clone()
    }

    /// The newest entry asked for, the log empty.
    pub(crate) fn none_logged() -> MockCmd {
        MockCmd::new(newest(), Ok(Value::Array(vec![])))
    }

    /// `message` appended to the log.
    pub(crate) fn logged(message: &str) -> MockCmd {
        MockCmd::new(
            redis::cmd("XADD")
                .arg("mdproxy:v1:purges")
                .arg("MAXLEN")
                .arg("~")
                .arg(super::KEPT)
                .arg("*")
                .arg("m")
                .arg(message)
                .clone(),
            Ok("1-0"),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::mock::{entry, newest};
    use super::*;
    use redis::Value;
    use redis_test::MockCmd;

    fn range(start: &str) -> redis::Cmd {
        redis::cmd("XRANGE")
            .arg("mdproxy:v1:purges")
            .arg(start)
            .arg("+")
            .arg("COUNT")
            .arg(PAGE)
            .clone()
    }

    /// The first session notes where the log stands and replays nothing; a later
    /// one reads what was logged after the newest entry heard, and moves on; a log
    /// that no longer holds that entry is a gap.
    #[tokio::test]
    async fn a_node_reads_what_was_logged_since_it_last_heard() {
        let log = PurgeLog::new(Link::on_mock(vec![
            MockCmd::new(newest(), Ok(Value::Array(vec![entry("5-1", "key /a")]))),
            MockCmd::new(
                range("5-1"),
                Ok(Value::Array(vec![
                    entry("5-1", "key /a"),
                    entry("6-0", "key /b"),
                    entry("7-3", "prefix /stock/"),
                ])),
            ),
            MockCmd::new(
                range("7-3"),
                Ok(Value::Array(vec![entry("7-3", "prefix /stock/")])),
            ),
            // Trimmed past 7-3 (or Redis lost its data and logged anew).
            MockCmd::new(range("7-3"), Ok(Value::Array(vec![entry("9-0", "key /c")]))),
            MockCmd::new(newest(), Ok(Value::Array(vec![]))),
            MockCmd::new(range("0-0"), Ok(Value::Array(vec![]))),
        ]));
        let none = Missed::default();
        assert_eq!(
            log.missed().await,
            Ok(Missed::default()),
            "the first session"
        );
        let read = log.missed().await.unwrap();
        assert_eq!(read.messages, ["key /b", "prefix /stock/"]);
        assert!(!read.gap);
        assert_eq!(log.missed().await, Ok(Missed::default()), "nothing new");
        let cut = log.missed().await.unwrap();
        assert_eq!((cut.messages, cut.gap), (vec!["key /c".to_owned()], true));
        // An empty log is read from its start.
        log.mark_heard().await.unwrap();
        assert_eq!(log.missed().await, Ok(none));
        assert!(log.link.is_up(), "every command was the one expected");
    }

    /// Purges kept while Redis is away are bounded, the oldest dropped; what is
    /// put back goes ahead of what was kept meanwhile.
    #[test]
    fn unsent_purges_are_bounded_and_keep_their_order() {
        let log = PurgeLog::new(Link::on_mock(vec![]));
        let key = |n: usize| Unsent::Key {
            key: format!("/k{n}"),
            message: format!("key /k{n}"),
        };
        for n in 0..=MAX_UNSENT {
            log.keep(key(n));
        }
        let taken = log.take_unsent();
        assert_eq!(taken.len(), MAX_UNSENT);
        assert_eq!(taken[0], key(1), "the oldest dropped");
        log.keep(key(9_999));
        log.put_back(taken[..2].to_vec());
        assert_eq!(log.take_unsent(), [key(1), key(2), key(9_999)]);
    }

    #[test]
    fn the_id_after_an_id() {
        assert_eq!(after("1700000000000-0"), "1700000000000-1");
        assert_eq!(after("0-0"), "0-1");
        assert_eq!(after("odd"), "odd");
    }
}
