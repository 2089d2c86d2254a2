//! The hub's share of the fleet: the leader lease (renewed by its holder, with a
//! term that never goes back), the codes every node registers, and the board the
//! leader relays to the others (one line per code, `code\trow`, after its term).

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use tokio::sync::Notify;

use super::link::{Link, PREFIX, Unavailable, nodes_key};

/// Takes or renews the lease (`scripts/lead.lua`).
static LEAD: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(include_str!("scripts/lead.lua")));

/// A term is Redis's clock in milliseconds when it began: one further ahead of
/// this node's clock than any skew between the two was not made by a leader (a
/// stray publication). Taken, it would make this node refuse every real board.
const MAX_TERM_AHEAD_MS: u64 = 3_600_000;

/// The channel boards are published on.
pub(super) fn board_channel() -> String {
    format!("{PREFIX}:board")
}

/// This node's wall clock in milliseconds (what a term is held against).
fn wall_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn codes_key(node: &str) -> String {
    format!("{PREFIX}:hub:codes:{node}")
}

/// The hub's share of the fleet: every node registers the codes its subscribers
/// want; one node (the leader, by a renewed lease with a term) polls the union and
/// publishes each board; the others take the leader's boards.
#[async_trait]
pub trait Leadership: Send + Sync {
    /// Whether the other nodes can be reached now (false: the node polls alone).
    fn is_up(&self) -> bool;

    /// Registers this node's codes for `ttl` (a dead node's codes drop out).
    async fn register_codes(&self, codes: &[String], ttl: Duration);

    /// Takes or renews the leader lease for `lease`: `Some(term)` while this node
    /// leads, `None` while another does.
    ///
    /// # Errors
    /// [`Unavailable`] when the fleet cannot be asked.
    async fn lead_hub(&self, lease: Duration) -> Result<Option<u64>, Unavailable>;

    /// Gives the leader lease back if this node holds it (when its hub stops
    /// polling, at shutdown or with no subscriber left), so that another node
    /// leads at its next poll instead of once the lease has run out: the
    /// followers' quotes would stand still meanwhile.
    async fn step_down(&self);

    /// The union of the codes every live node registered.
    ///
    /// # Errors
    /// [`Unavailable`] when the fleet cannot be asked.
    async fn all_codes(&self) -> Result<Vec<String>, Unavailable>;

    /// Publishes the leader's board of `term` (rows by code).
    async fn publish_board(&self, term: u64, rows: &HashMap<String, Bytes>);

    /// The latest board a leader published (rows by code).
    fn latest_board(&self) -> Arc<HashMap<String, Bytes>>;

    /// Resolves when the next board arrives.
    async fn board_arrived(&self);
}

/// The latest board a leader published, and its term.
#[derive(Default)]
struct Board {
    latest: Mutex<(u64, Arc<HashMap<String, Bytes>>)>,
    /// Woken when a board arrives.
    arrived: Notify,
}

impl Board {
    /// After a new subscription (Redis may have lost its data): the next board is
    /// taken whatever its term.
    fn forget_term(&self) {
        self.latest
            .lock()
            .expect("cluster lock is never poisoned")
            .0 = 0;
    }

    /// Takes a published board, unless an older term's (a deposed leader's) or one
    /// whose term lies beyond this node's clock (`now_ms`) by more than any skew.
    fn take(&self, payload: &[u8], now_ms: u64) {
        let mut lines = payload.split(|b| *b == b'\n');
        let Some(term) = lines
            .next()
            .and_then(|t| std::str::from_utf8(t).ok())
            .and_then(|t| t.parse::<u64>().ok())
        else {
            return;
        };
        if term > now_ms.saturating_add(MAX_TERM_AHEAD_MS) {
            tracing::debug!(term, "a board whose term lies in the future: not taken");
            return;
        }
        let rows: HashMap<String, Bytes> = lines
            .filter_map(|line| {
                let tab = line.iter().position(|b| *b == b'\t')?;
                let code = std::str::from_utf8(&line[..tab]).ok()?.to_owned();
                Some((code, Bytes::copy_from_slice(&line[tab + 1..])))
            })
            .collect();
        let mut latest = self.latest.lock().expect("cluster lock is never poisoned");
        if term >= latest.0 {
            *latest = (term, Arc::new(rows));
            drop(latest);
            self.arrived.notify_waiters();
        }
    }
}

/// The hub's leadership on Redis, and the latest board heard.
pub struct RedisLeadership {
    link: Link,
    board: Board,
}

impl RedisLeadership {
    pub(super) fn new(link: Link) -> RedisLeadership {
        RedisLeadership {
            link,
            board: Board::default(),
        }
    }

    /// After a new subscription (Redis may have lost its data): the next board is
    /// taken whatever its term.
    pub(super) fn forget_term(&self) {
        self.board.forget_term();
    }

    /// A board published on [`board_channel`], taken against this node's clock.
    pub(super) fn heard_board(&self, payload: &[u8]) {
        self.board.take(payload, wall_ms());
    }
}

#[async_trait]
impl Leadership for RedisLeadership {
    fn is_up(&self) -> bool {
        self.link.is_up()
    }

    async fn register_codes(&self, codes: &[String], ttl: Duration) {
        let (key, value) = (codes_key(self.link.instance()), codes.join(","));
        let ms = ttl.as_millis() as u64;
        let _ = self
            .link
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

    async fn lead_hub(&self, lease: Duration) -> Result<Option<u64>, Unavailable> {
        // One shard on a Redis Cluster: the script reads both.
        let hub = self.link.together("hub");
        let keys = (
            format!("{PREFIX}:{hub}:leader"),
            format!("{PREFIX}:{hub}:term"),
        );
        let (node, ms) = (self.link.instance().to_owned(), lease.as_millis() as u64);
        let term: u64 = self
            .link
            .run(|mut c| async move {
                LEAD.key(&keys.0)
                    .key(&keys.1)
                    .arg(&node)
                    .arg(ms)
                    .invoke_async(&mut c)
                    .await
            })
            .await?;
        Ok((term > 0).then_some(term))
    }

    async fn step_down(&self) {
        let leader = format!("{PREFIX}:{}:leader", self.link.together("hub"));
        let node = self.link.instance().to_owned();
        let _ = self
            .link
            .run(|mut c| async move {
                crate::lock::RELEASE
                    .key(&leader)
                    .arg(&node)
                    .invoke_async::<i64>(&mut c)
                    .await
            })
            .await;
    }

    async fn all_codes(&self) -> Result<Vec<String>, Unavailable> {
        let nodes_key = nodes_key();
        let nodes: Vec<String> = self
            .link
            .run(|mut c| async move {
                redis::cmd("ZRANGE")
                    .arg(&nodes_key)
                    .arg(0)
                    .arg(-1)
                    .query_async(&mut c)
                    .await
            })
            .await?;
        let mut keys: Vec<String> = nodes.iter().map(|n| codes_key(n)).collect();
        keys.push(codes_key(self.link.instance()));
        let lists: Vec<Option<String>> = self
            .link
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

    async fn publish_board(&self, term: u64, rows: &HashMap<String, Bytes>) {
        let mut message =
            Vec::with_capacity(16 + rows.values().map(|r| r.len() + 16).sum::<usize>());
        message.extend_from_slice(term.to_string().as_bytes());
        for (code, row) in rows {
            message.push(b'\n');
            message.extend_from_slice(code.as_bytes());
            message.push(b'\t');
            message.extend_from_slice(row);
        }
        let _ = self.link.publish_on(board_channel(), message).await;
    }

    fn latest_board(&self) -> Arc<HashMap<String, Bytes>> {
        Arc::clone(
            &self
                .board
                .latest
                .lock()
                .expect("cluster lock is never poisoned")
                .1,
        )
    }

    async fn board_arrived(&self) {
        self.board.arrived.notified().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::link::mock;
    use redis::Value;
    use redis_test::MockCmd;

    const NOW: u64 = 1_773_000_000_000;

    fn row(board: &Board, code: &str) -> Option<Bytes> {
        board.latest.lock().unwrap().1.get(code).cloned()
    }

    /// Boards of the current term or a newer one are taken, a deposed leader's are
    /// not; a new subscription takes the next whatever its term.
    #[test]
    fn boards_follow_the_newest_term() {
        let board = Board::default();
        board.take(format!("{NOW}\n600519\ta").as_bytes(), NOW);
        assert_eq!(row(&board, "600519").unwrap(), "a");
        board.take(format!("{}\n600519\told", NOW - 5).as_bytes(), NOW);
        assert_eq!(row(&board, "600519").unwrap(), "a", "a deposed leader's");
        board.take(b"not a term\n600519\tx", NOW);
        assert_eq!(row(&board, "600519").unwrap(), "a");
        board.forget_term();
        board.take(format!("{}\n600519\tb", NOW - 5).as_bytes(), NOW);
        assert_eq!(row(&board, "600519").unwrap(), "b");
    }

    /// Defect: a board published with term `u64::MAX` made followers refuse every
    /// real leader's board until they subscribed again. A term beyond this node's
    /// clock by more than any skew is not taken.
    #[test]
    fn a_board_from_the_far_future_is_not_taken() {
        let board = Board::default();
        board.take(format!("{NOW}\n600519\treal").as_bytes(), NOW);
        board.take(format!("{}\n600519\tstray", u64::MAX).as_bytes(), NOW);
        assert_eq!(row(&board, "600519").unwrap(), "real");
        board.take(format!("{}\n600519\tnext", NOW + 1).as_bytes(), NOW + 500);
        assert_eq!(
            row(&board, "600519").unwrap(),
            "next",
            "the leader's next board"
        );
        // A skew of minutes is no reason to refuse a board.
        board.take(format!("{}\n600519\tskewed", NOW + 300_000).as_bytes(), NOW);
        assert_eq!(row(&board, "600519").unwrap(), "skewed");
    }

    /// The lease: the script's term means leading, 0 means another node leads; the
    /// union of codes reads every living node's list once and dedups.
    #[tokio::test]
    async fn the_lease_and_the_union_of_codes() {
        let lead = || {
            mock::eval(
                &LEAD,
                &["mdproxy:v1:hub:leader", "mdproxy:v1:hub:term"],
                &["n1", "2000"],
            )
        };
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let leadership = RedisLeadership::new(Link::on_mock(vec![
            MockCmd::new(lead(), Ok(NOW as i64)),
            MockCmd::new(
                mock::eval(&crate::lock::RELEASE, &["mdproxy:v1:hub:leader"], &["n1"]),
                Ok(1),
            ),
            MockCmd::new(lead(), Ok(0)),
            MockCmd::new(
                redis::cmd("ZRANGE")
                    .arg("mdproxy:v1:nodes")
                    .arg(0)
                    .arg(-1)
                    .clone(),
                Ok(Value::Array(vec![bulk("n1"), bulk("n2")])),
            ),
            MockCmd::new(
                redis::cmd("MGET")
                    .arg(&[
                        "mdproxy:v1:hub:codes:n1",
                        "mdproxy:v1:hub:codes:n2",
                        "mdproxy:v1:hub:codes:n1",
                    ])
                    .clone(),
                Ok(Value::Array(vec![
                    bulk("600519,000001"),
                    bulk("000001,300750"),
                    Value::Nil,
                ])),
            ),
        ]));
        let lease = Duration::from_secs(2);
        assert_eq!(leadership.lead_hub(lease).await, Ok(Some(NOW)));
        // Stepping down gives back the lease this node holds, and only that.
        leadership.step_down().await;
        assert_eq!(leadership.lead_hub(lease).await, Ok(None));
        assert_eq!(
            leadership.all_codes().await.unwrap(),
            ["000001", "300750", "600519"]
        );
    }
}
