//! The fleet's purge log: every purge is also appended to a Redis stream (about the
//! newest [`KEPT`]), so that a node which was not subscribed when a purge was
//! published (a Redis blip of its own, a subscription found silent) reads what it
//! missed when it subscribes again; and this node's purges that could not reach
//! Redis are kept (the newest [`MAX_UNSENT`]) to be sent once it answers again.
//! Where a node stands in the log can be kept in a file ([`Mark`]), so that a node
//! restarted with its disk tier reads what was purged while it was down.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

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
    /// A node whose place in the log is kept in a [`Mark`] found none there (its
    /// first start with it, or the file lost): what its disk holds may predate
    /// purges it never heard of.
    pub(crate) unplaced: bool,
}

/// The ID `XREVRANGE` is taken to answer for an empty log.
const EMPTY: &str = "0-0";
/// The field of the entry a node with a [`Mark`] logs when it finds the log empty.
const START_FIELD: &str = "start";

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

/// A file that keeps the newest entry heard across restarts: a node's disk tier
/// outlives the process, and what was purged while it was down must reach it too.
/// Written (a new file, synced, renamed over the old) once the application says
/// it applied every purge handed to it up to that entry (`RedisStore`'s
/// `applied`), so a restart in between reads some purges twice, which costs
/// misses, never a purged answer served. Never "0-0": an empty log is given an
/// entry first ([`PurgeLog::newest`]), since a place that names no entry hides a
/// log that Redis lost.
pub(crate) struct Mark {
    path: PathBuf,
    /// The entry last written, so that an unchanged one is not written again.
    kept: Mutex<Option<String>>,
    /// A write failed already (said once, not at every probe).
    failed: AtomicBool,
}

impl Mark {
    /// The mark at `path`, and the entry it holds (`None` when there is no file
    /// or it does not hold an entry ID other than "0-0": the node has no place).
    pub(crate) fn open(path: PathBuf) -> (Mark, Option<String>) {
        let held = std::fs::read_to_string(&path)
            .ok()
            .map(|text| text.trim().to_owned())
            .filter(|id| is_entry_id(id) && id != EMPTY);
        let mark = Mark {
            path,
            kept: Mutex::new(held.clone()),
            failed: AtomicBool::new(false),
        };
        (mark, held)
    }

    /// Keeps `id` unless it is kept already (or is "0-0"). Written and synced on
    /// the blocking pool (a sync can take a slow disk hundreds of milliseconds,
    /// and a runtime thread must not wait for it): only when entries were logged
    /// since the last, at most once a probe (5 s). The caller waits for it, so
    /// marks are written in the order they are kept.
    async fn keep(self: &Arc<Self>, id: &str) {
        if id == EMPTY || self.kept().as_deref() == Some(id) {
            return;
        }
        let (mark, id) = (Arc::clone(self), id.to_owned());
        let written = tokio::task::spawn_blocking(move || mark.write(&id))
            .await
            .unwrap_or_else(|e| Err(std::io::Error::other(e)));
        if let Err(e) = written
            && !self.failed.swap(true, Ordering::Relaxed)
        {
            tracing::warn!(path = %self.path.display(), error = %e, "cannot keep where this node stands in the purge log: after a restart its disk tier may miss purges made while it was down");
        }
    }

    fn kept(&self) -> MutexGuard<'_, Option<String>> {
        self.kept.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Writes `id` (a new file, synced, renamed over the old). Blocking; the lock
    /// on what is kept is not held meanwhile, so a look at it never waits for a
    /// sync.
    fn write(&self, id: &str) -> std::io::Result<()> {
        let fresh = self.path.with_extension("new");
        std::fs::File::create(&fresh)
            .and_then(|mut file| {
                std::io::Write::write_all(&mut file, format!("{id}\n").as_bytes())?;
                file.sync_all()
            })
            .and_then(|()| std::fs::rename(&fresh, &self.path))?;
        *self.kept() = Some(id.to_owned());
        Ok(())
    }
}

/// Whether `id` is a stream entry ID (`ms-seq`, both whole numbers).
fn is_entry_id(id: &str) -> bool {
    id.split_once('-')
        .is_some_and(|(ms, seq)| ms.parse::<u64>().is_ok() && seq.parse::<u64>().is_ok())
}

/// The log on Redis, and what this node knows of it.
pub(crate) struct PurgeLog {
    link: Link,
    /// The newest entry known heard here (by the subscription, or read from the
    /// log); `None` until the first session of a node that kept no place in a
    /// [`Mark`] (or has none).
    heard: Mutex<Option<String>>,
    /// Where the newest entry heard is kept across restarts, if anywhere.
    mark: Option<Arc<Mark>>,
    /// A mark is kept but named no place at start (see [`Missed::unplaced`]);
    /// cleared by the first catch-up.
    unplaced: AtomicBool,
    /// This node's purges that did not reach Redis, oldest first.
    unsent: Mutex<VecDeque<Unsent>>,
}

impl PurgeLog {
    /// The log on `link`; with `mark`, a node restarted reads from where it stood.
    pub(crate) fn new(link: Link, mark: Option<PathBuf>) -> PurgeLog {
        let (mark, heard) = match mark.map(Mark::open) {
            Some((mark, heard)) => {
                if let Some(id) = &heard {
                    tracing::info!(entry = %id, "the purge log is read from where this node stood before its restart");
                }
                (Some(Arc::new(mark)), heard)
            }
            None => (None, None),
        };
        PurgeLog {
            link,
            unplaced: AtomicBool::new(mark.is_some() && heard.is_none()),
            heard: Mutex::new(heard),
            mark,
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
        self.append_field("m", message).await.map(drop)
    }

    /// Appends an entry of one `field`, and says its ID.
    async fn append_field(&self, field: &str, value: &str) -> Result<String, Unavailable> {
        let key = log_key();
        self.link
            .run(|mut c| async move {
                redis::cmd("XADD")
                    .arg(&key)
                    .arg("MAXLEN")
                    .arg("~")
                    .arg(KEPT)
                    .arg("*")
                    .arg(field)
                    .arg(value)
                    .query_async::<String>(&mut c)
                    .await
            })
            .await
    }

    /// The newest entry of the log ("0-0" when it is empty, but for a node with a
    /// [`Mark`], which logs an entry that names no purge first: its field is not
    /// `m`).
    ///
    /// # Errors
    /// [`Unavailable`] when Redis is away or slow.
    pub(crate) async fn newest(&self) -> Result<String, Unavailable> {
        let newest = self.newest_logged().await?;
        if newest == EMPTY && self.mark.is_some() {
            return self.append_field(START_FIELD, "").await;
        }
        Ok(newest)
    }

    async fn newest_logged(&self) -> Result<String, Unavailable> {
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
            .map_or_else(|| EMPTY.into(), |(id, _)| id))
    }

    /// Notes that every entry up to `id` was heard (the subscription was known up
    /// after `id` was read): the next catch-up reads from there.
    pub(crate) fn heard_up_to(&self, id: String) {
        *self.heard() = Some(id);
    }

    /// The newest entry heard, if any.
    pub(crate) fn heard_last(&self) -> Option<String> {
        self.heard().clone()
    }

    /// Whether the place heard is kept across restarts.
    pub(crate) fn is_marked(&self) -> bool {
        self.mark.is_some()
    }

    /// Keeps `id` in the [`Mark`]: every purge logged up to it was applied.
    pub(crate) async fn applied_up_to(&self, id: &str) {
        if let Some(mark) = &self.mark {
            mark.keep(id).await;
        }
    }

    /// Notes that every entry logged so far was heard, and says the newest.
    ///
    /// # Errors
    /// [`Unavailable`] when Redis is away or slow.
    pub(crate) async fn mark_heard(&self) -> Result<String, Unavailable> {
        let newest = self.newest().await?;
        self.heard_up_to(newest.clone());
        Ok(newest)
    }

    /// The messages logged since the newest entry heard here, oldest first, and
    /// those counted as heard; and whether the log lost that entry meanwhile. The
    /// first call (no entry heard yet: the node's first session) only notes where
    /// the log stands. A node restarted with a [`Mark`] reads from the entry it
    /// names, as a later session does.
    ///
    /// # Errors
    /// [`Unavailable`] when Redis is away or slow.
    pub(crate) async fn missed(&self) -> Result<Missed, Unavailable> {
        let Some(from) = self.heard().clone() else {
            self.mark_heard().await?;
            return Ok(Missed {
                unplaced: self.unplaced.swap(false, Ordering::Relaxed),
                ..Missed::default()
            });
        };
        let mut missed = Missed::default();
        // Noted heard once every page is read: a page that fails leaves the place
        // where it was, and the next catch-up reads the earlier pages again.
        let mut last_read = None;
        // From the entry heard itself: its absence says the log was cut.
        let mut start = from.clone();
        for page in 0..MAX_PAGES {
            let mut entries = self.range(&start).await?;
            let full = entries.len() == PAGE;
            if page == 0 && from != EMPTY {
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
            last_read = Some(last.clone());
            missed.messages.extend(
                entries
                    .into_iter()
                    .filter_map(|(_, fields)| message_of(fields)),
            );
            if !full {
                break;
            }
        }
        if let Some(last) = last_read {
            *self.heard() = Some(last);
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
        let log = PurgeLog::new(
            Link::on_mock(vec![
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
            ]),
            None,
        );
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

    /// A node restarted with a mark reads the log from the entry it names, not
    /// from where the log stands; the mark moves when the application says it
    /// applied what was heard (never to "0-0"). A file that names no place ("0-0",
    /// not an ID) leaves the node unplaced: it logs a place and says so once.
    #[tokio::test]
    async fn a_restarted_node_reads_from_its_mark() {
        let dir = std::env::temp_dir().join(format!("purge-mark-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("purge-log-mark");
        let held = || std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, "5-1\n").unwrap();
        let log = PurgeLog::new(
            Link::on_mock(vec![MockCmd::new(
                range("5-1"),
                Ok(Value::Array(vec![
                    entry("5-1", "key /a"),
                    entry("6-0", "key /b"),
                ])),
            )]),
            Some(path.clone()),
        );
        let read = log.missed().await.unwrap();
        assert_eq!(read.messages, ["key /b"]);
        assert!(!read.gap && !read.unplaced);
        assert_eq!(log.heard_last().as_deref(), Some("6-0"));
        assert_eq!(held(), "5-1\n", "kept once applied, not when read");
        log.applied_up_to("6-0").await;
        assert_eq!(held(), "6-0\n");
        log.applied_up_to("0-0").await;
        assert_eq!(held(), "6-0\n", "an empty log is no place");
        assert!(log.link.is_up(), "every command was the one expected");

        let start = redis::cmd("XADD")
            .arg("mdproxy:v1:purges")
            .arg("MAXLEN")
            .arg("~")
            .arg(KEPT)
            .arg("*")
            .arg("start")
            .arg("")
            .clone();
        for unplaced in ["0-0\n", "6-0 and more\n"] {
            std::fs::write(&path, unplaced).unwrap();
            let log = PurgeLog::new(
                Link::on_mock(vec![
                    MockCmd::new(newest(), Ok(Value::Array(vec![]))),
                    MockCmd::new(start.clone(), Ok("8-0")),
                    MockCmd::new(range("8-0"), Ok(Value::Array(vec![]))),
                ]),
                Some(path.clone()),
            );
            let first = log.missed().await.unwrap();
            assert!(first.unplaced && !first.gap, "{unplaced:?}");
            assert_eq!(log.heard_last().as_deref(), Some("8-0"), "a place logged");
            // Redis lost its data: the place is gone, which is a gap.
            let lost = log.missed().await.unwrap();
            assert!(lost.gap && !lost.unplaced);
            assert!(log.link.is_up(), "every command was the one expected");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A catch-up that fails half-way keeps the place it started from: the pages
    /// read before the failure are read again, not skipped.
    #[tokio::test]
    async fn a_catch_up_cut_short_is_read_again() {
        let page: Vec<Value> = (1..=PAGE)
            .map(|n| entry(&format!("{n}-0"), &format!("key /k{n}")))
            .collect();
        let mut first = vec![entry("0-5", "key /old")];
        first.extend(page.iter().take(PAGE - 1).cloned());
        let log = PurgeLog::new(
            Link::on_mock(vec![
                MockCmd::new(newest(), Ok(Value::Array(vec![entry("0-5", "key /old")]))),
                MockCmd::new(range("0-5"), Ok(Value::Array(first))),
                crate::link::mock::failing(range(&after(&format!("{}-0", PAGE - 1)))),
            ]),
            None,
        );
        log.mark_heard().await.unwrap();
        assert!(log.missed().await.is_err());
        assert_eq!(log.heard_last().as_deref(), Some("0-5"), "not moved");
    }

    /// Purges kept while Redis is away are bounded, the oldest dropped; what is
    /// put back goes ahead of what was kept meanwhile.
    #[test]
    fn unsent_purges_are_bounded_and_keep_their_order() {
        let log = PurgeLog::new(Link::on_mock(vec![]), None);
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
