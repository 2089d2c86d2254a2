//! The upstream's pushback, shared by the fleet (issue 27): a `Retry-After` pause
//! one node was given is announced to every node and kept in Redis for those that
//! join later; a lower rate one node chose is announced, so the fleet moves as one
//! rate; the vendor quotas are counted in Redis per minute and per vendor day. The
//! decisions (how long, how slow, what is left) stay with the upstream.

use std::sync::LazyLock;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::broadcast;

use super::link::{Link, PREFIX, Unavailable};

/// Extends a pause (`scripts/pause.lua`).
static PAUSE: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(include_str!("scripts/pause.lua")));
/// Counts one request against the quotas (`scripts/quota.lua`).
static QUOTA: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(include_str!("scripts/quota.lua")));

/// How long a quota count is kept past the end of its period: any clock skew
/// between the nodes, then it goes.
const COUNT_KEPT_PAST: Duration = Duration::from_secs(600);

/// What another node announced.
#[derive(Clone, Debug, PartialEq)]
pub enum Announcement {
    /// `target` asked for a pause of `wait` (from when it was heard).
    Pause { target: String, wait: Duration },
    /// `target`'s rate went down to `rate` requests per second.
    SlowDown {
        target: String,
        rate: f64,
        reason: String,
    },
}

/// One request to count against a target's quotas, with the periods it falls in
/// (on the asking node's clock).
#[derive(Clone, Debug, PartialEq)]
pub struct QuotaAsk {
    pub per_minute: u64,
    pub per_day: u64,
    /// Requests of the day kept for clients.
    pub reserve: u64,
    pub client: bool,
    /// The minute (Unix minutes) and the vendor day (its date) of the request.
    pub minute: i64,
    pub day: String,
    /// How long until each period ends.
    pub minute_ends_in: Duration,
    pub day_ends_in: Duration,
}

/// What the fleet's count says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuotaVerdict {
    Counted,
    MinuteSpent,
    DaySpent,
    /// Background work steps back to keep the day's reserve for clients.
    Reserve,
}

/// The fleet's counts after one ask.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QuotaCount {
    pub verdict: QuotaVerdict,
    pub this_minute: u64,
    pub today: u64,
}

/// The upstream's pushback, shared by the fleet: a pause one node was asked for
/// (`Retry-After`), a lower rate one node chose, and the vendor quotas' counts.
#[async_trait]
pub trait FleetLimits: Send + Sync {
    /// Tells every node that `target` asked for a pause of `wait`.
    async fn pause(&self, target: &str, wait: Duration);

    /// Tells every node that `target`'s rate went down to `rate` (why: `reason`).
    async fn slow_down(&self, target: &str, rate: f64, reason: &str);

    /// Counts one request against `target`'s quotas for the fleet.
    ///
    /// # Errors
    /// [`Unavailable`] when the fleet cannot be asked (the node counts alone).
    async fn take_quota(&self, target: &str, ask: QuotaAsk) -> Result<QuotaCount, Unavailable>;

    /// What other nodes announced (pauses, slow-downs), as it arrives.
    fn announcements(&self) -> broadcast::Receiver<Announcement>;
}

/// The pushback on Redis, and the announcements heard on the events channel, for
/// the upstream to take in.
pub struct RedisLimits {
    link: Link,
    announcements: broadcast::Sender<Announcement>,
    /// The channel's first receiver, handed to the first to subscribe: what is told
    /// before anyone subscribes waits in it instead of being dropped. The pauses
    /// recalled on joining can come before the app's relay subscribes (the node
    /// joins from a task started with it), and a node started during a pause then
    /// never heard of it.
    first: std::sync::Mutex<Option<broadcast::Receiver<Announcement>>>,
}

impl RedisLimits {
    pub(super) fn new(link: Link) -> RedisLimits {
        let (announcements, first) = broadcast::channel(256);
        RedisLimits {
            link,
            announcements,
            first: std::sync::Mutex::new(Some(first)),
        }
    }

    /// One publication of `kind` (`pause`, `slow`): `<node> <target> <value>[ <reason>]`.
    /// This node's own are not passed on (it took them in already).
    pub(super) fn heard(&self, kind: &str, rest: &str) {
        let mut parts = rest.splitn(4, ' ');
        let (Some(node), Some(target), Some(value)) = (parts.next(), parts.next(), parts.next())
        else {
            return;
        };
        if node == self.link.instance() {
            return;
        }
        let target = target.to_owned();
        let announcement = match kind {
            "pause" => {
                let Ok(ms) = value.parse::<u64>() else { return };
                Announcement::Pause {
                    target,
                    wait: Duration::from_millis(ms),
                }
            }
            "slow" => {
                let Ok(rate) = value.parse::<f64>() else {
                    return;
                };
                if !rate.is_finite() || rate < 0.0 {
                    return;
                }
                Announcement::SlowDown {
                    target,
                    rate,
                    reason: parts.next().unwrap_or_default().to_owned(),
                }
            }
            _ => return,
        };
        let _ = self.announcements.send(announcement);
    }

    fn tell(&self, announcement: Announcement) {
        let _ = self.announcements.send(announcement);
    }
}

fn pauses_key() -> String {
    format!("{PREFIX}:pauses")
}

impl RedisLimits {
    /// Runs the pause script: extends `target`'s pause to `wait` when given, and
    /// returns every pause still running with its time left.
    async fn pauses(
        &self,
        extend: Option<(&str, Duration)>,
    ) -> Result<Vec<(String, Duration)>, Unavailable> {
        let key = pauses_key();
        let extend =
            extend.map(|(target, wait)| (target.to_owned(), wait.as_millis().max(1) as u64));
        let running: Vec<(String, u64)> = self
            .link
            .run(|mut c| async move {
                let mut call = PAUSE.key(&key);
                if let Some((target, ms)) = &extend {
                    call.arg(target).arg(*ms);
                }
                call.invoke_async(&mut c).await
            })
            .await?;
        Ok(running
            .into_iter()
            .map(|(target, ms)| (target, Duration::from_millis(ms)))
            .collect())
    }

    /// How long `target` is still paused for the fleet, if it is.
    ///
    /// # Errors
    /// [`Unavailable`] when Redis is away or slow.
    pub async fn paused_for(&self, target: &str) -> Result<Option<Duration>, Unavailable> {
        let running = self.pauses(None).await?;
        Ok(running
            .into_iter()
            .find(|(t, _)| t == target)
            .map(|(_, left)| left))
    }

    /// After joining: the pauses the fleet keeps, told to this node as if announced
    /// (it may have missed them while Redis was away or before it started).
    pub(super) async fn recall_pauses(&self) {
        if let Ok(running) = self.pauses(None).await {
            for (target, wait) in running {
                self.tell(Announcement::Pause { target, wait });
            }
        }
    }
}

#[async_trait]
impl FleetLimits for RedisLimits {
    async fn pause(&self, target: &str, wait: Duration) {
        let _ = self.pauses(Some((target, wait))).await;
        let ms = wait.as_millis().max(1);
        let node = self.link.instance();
        let _ = self
            .link
            .publish(format!("pause {node} {target} {ms}"))
            .await;
    }

    async fn slow_down(&self, target: &str, rate: f64, reason: &str) {
        let node = self.link.instance();
        let _ = self
            .link
            .publish(format!("slow {node} {target} {rate} {reason}"))
            .await;
    }

    async fn take_quota(&self, target: &str, ask: QuotaAsk) -> Result<QuotaCount, Unavailable> {
        let keys = (
            // One shard on a Redis Cluster: the script reads both.
            format!(
                "{PREFIX}:quota:{}:minute:{}",
                self.link.together(target),
                ask.minute
            ),
            format!(
                "{PREFIX}:quota:{}:day:{}",
                self.link.together(target),
                ask.day
            ),
        );
        let kept = |ends_in: Duration| (ends_in + COUNT_KEPT_PAST).as_millis() as u64;
        let reserve = ask.reserve;
        let args = (
            ask.per_minute,
            ask.per_day,
            u8::from(ask.client),
            kept(ask.minute_ends_in),
            kept(ask.day_ends_in),
        );
        let (verdict, this_minute, today): (u8, u64, u64) = self
            .link
            .run(|mut c| async move {
                QUOTA
                    .key(&keys.0)
                    .key(&keys.1)
                    .arg(args.0)
                    .arg(args.1)
                    .arg(reserve)
                    .arg(args.2)
                    .arg(args.3)
                    .arg(args.4)
                    .invoke_async(&mut c)
                    .await
            })
            .await?;
        let verdict = match verdict {
            0 => QuotaVerdict::Counted,
            1 => QuotaVerdict::MinuteSpent,
            2 => QuotaVerdict::DaySpent,
            _ => QuotaVerdict::Reserve,
        };
        Ok(QuotaCount {
            verdict,
            this_minute,
            today,
        })
    }

    fn announcements(&self) -> broadcast::Receiver<Announcement> {
        let first = self
            .first
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        first.unwrap_or_else(|| self.announcements.subscribe())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::link::mock;
    use redis::Value;
    use redis_test::MockCmd;

    /// A pause recalled before anyone subscribed reaches the first subscriber (the
    /// app's relay subscribes after the node starts joining); later subscribers
    /// hear only what comes after them, as any broadcast's.
    #[test]
    fn what_is_told_before_the_first_subscriber_waits_for_it() {
        let limits = RedisLimits::new(Link::on_mock(vec![]));
        limits.tell(Announcement::Pause {
            target: "primary".into(),
            wait: Duration::from_secs(30),
        });
        let mut first = limits.announcements();
        let mut later = limits.announcements();
        assert!(matches!(
            first.try_recv(),
            Ok(Announcement::Pause { target, .. }) if target == "primary"
        ));
        assert!(later.try_recv().is_err());
    }

    /// A pause is kept in Redis for its length and announced with this node's name;
    /// other nodes' announcements reach the upstream, this node's own do not.
    #[tokio::test]
    async fn a_pause_is_kept_and_announced_to_the_others() {
        let limits = RedisLimits::new(Link::on_mock(vec![
            MockCmd::new(
                mock::eval(&PAUSE, &["mdproxy:v1:pauses"], &["primary", "30000"]),
                Ok(Value::Array(vec![
                    Value::BulkString(b"primary".to_vec()),
                    Value::Int(30_000),
                ])),
            ),
            MockCmd::new(
                redis::cmd("PUBLISH")
                    .arg("mdproxy:v1:events")
                    .arg("pause n1 primary 30000")
                    .clone(),
                Ok(3),
            ),
            MockCmd::new(
                mock::eval(&PAUSE, &["mdproxy:v1:pauses"], &[]),
                Ok(Value::Array(vec![
                    Value::BulkString(b"fallback-1".to_vec()),
                    Value::Int(1_000),
                    Value::BulkString(b"primary".to_vec()),
                    Value::Int(12_000),
                ])),
            ),
        ]));
        let mut heard = limits.announcements();
        limits.pause("primary", Duration::from_secs(30)).await;
        assert_eq!(
            limits.paused_for("primary").await,
            Ok(Some(Duration::from_secs(12)))
        );
        limits.heard("pause", "n1 primary 30000");
        assert!(heard.try_recv().is_err(), "its own announcement");
        limits.heard("pause", "n2 primary 30000");
        limits.heard(
            "slow",
            "n2 fallback-1 2.5 the upstream throttled us (429 or 503)",
        );
        limits.heard("slow", "n2 primary NaN x");
        limits.heard("pause", "n2 primary soon");
        assert_eq!(
            heard.try_recv().unwrap(),
            Announcement::Pause {
                target: "primary".into(),
                wait: Duration::from_secs(30)
            }
        );
        assert_eq!(
            heard.try_recv().unwrap(),
            Announcement::SlowDown {
                target: "fallback-1".into(),
                rate: 2.5,
                reason: "the upstream throttled us (429 or 503)".into()
            }
        );
        assert!(heard.try_recv().is_err(), "nonsense is dropped");
    }

    /// The quota script is asked with the periods' keys and limits; its verdict and
    /// counts come back.
    #[tokio::test]
    async fn the_quota_is_counted_per_period_for_the_fleet() {
        let ask = QuotaAsk {
            per_minute: 10,
            per_day: 1_000,
            reserve: 200,
            client: false,
            minute: 29_000_000,
            day: "2026-03-02".into(),
            minute_ends_in: Duration::from_secs(20),
            day_ends_in: Duration::from_secs(3_600),
        };
        let limits = RedisLimits::new(Link::on_mock(vec![MockCmd::new(
            mock::eval(
                &QUOTA,
                &[
                    "mdproxy:v1:quota:primary:minute:29000000",
                    "mdproxy:v1:quota:primary:day:2026-03-02",
                ],
                &["10", "1000", "200", "0", "620000", "4200000"],
            ),
            Ok(Value::Array(vec![
                Value::Int(3),
                Value::Int(4),
                Value::Int(800),
            ])),
        )]));
        assert_eq!(
            limits.take_quota("primary", ask).await,
            Ok(QuotaCount {
                verdict: QuotaVerdict::Reserve,
                this_minute: 4,
                today: 800
            })
        );
    }
}
