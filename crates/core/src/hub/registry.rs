//! Who is subscribed: each subscriber's feed, token and connection; the union of
//! their codes (one shared copy per code, counted by how many want it); the limits
//! on streams per token and in all; whether a poll loop runs.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use crate::hub::port::{Code, Hangup};
use crate::hub::stream::Feed;
use mdproxy_api::error::Error;
use mdproxy_config::HubConfig;

/// Seconds a client is told to wait after the per-token stream limit.
const STREAM_RETRY_AFTER_SECS: u64 = 5;

/// One open stream.
pub(super) struct Subscriber {
    token: usize,
    pub(super) feed: Arc<Feed>,
    /// Closes the subscriber's connection (set when it runs over HTTP).
    pub(super) connection: Option<Arc<dyn Hangup>>,
}

/// Every open stream, and what the poll loop reads of them.
#[derive(Default)]
pub(super) struct Registry {
    next_id: u64,
    pub(super) subscribers: HashMap<u64, Subscriber>,
    /// How many subscribers want each code: the poll loop's union. Its keys are
    /// the one copy of each code that every subscriber's list shares.
    refs: BTreeMap<Code, usize>,
    per_token: HashMap<usize, usize>,
    /// Whether a poll loop is running (changed only under this lock).
    pub(super) polling: bool,
    /// Whom the fan-out reaches; built again after a change.
    reach: Option<Arc<Reach>>,
}

/// The streams a fan-out reaches, each in its way.
#[derive(Default)]
pub(super) struct Reach {
    /// Streams on an outlet: the fan-out writes their events itself.
    pub(super) outlets: Vec<Arc<Feed>>,
    /// The others (HTTP/2, TLS), whose tasks the fan-out wakes: grouped by
    /// connection, so that an HTTP/2 connection's task, woken by the first of its
    /// streams, finds the rest ready when it runs and writes their events at once.
    pub(super) woken: Vec<Arc<Feed>>,
}

/// What registering a subscriber did.
pub(super) struct Added {
    pub(super) id: u64,
    pub(super) feed: Arc<Feed>,
    /// No poll loop ran: the caller starts one.
    pub(super) start_loop: bool,
    /// The union gained codes: a running loop polls early for them.
    pub(super) new_codes: bool,
}

impl Registry {
    /// The limits a new stream of `token` must pass: `config.max_streams` in all,
    /// `config.max_streams_per_token` per token.
    ///
    /// # Errors
    /// 503 past the total, 429 past the token's limit.
    pub(super) fn admit(&self, token: usize, config: &HubConfig) -> Result<(), Error> {
        if self.subscribers.len() >= config.max_streams {
            return Err(Error::Overloaded {
                reason: format!(
                    "the proxy serves its maximum of {} streams",
                    config.max_streams
                ),
                upstream: false,
            });
        }
        if self.per_token.get(&token).copied().unwrap_or(0) >= config.max_streams_per_token {
            return Err(Error::RateLimited {
                retry_after_secs: STREAM_RETRY_AFTER_SECS,
            });
        }
        Ok(())
    }

    /// Registers a subscriber of `token` for `codes` (distinct, in its order):
    /// `feed` builds its feed from the shared copies of its codes.
    pub(super) fn add(
        &mut self,
        token: usize,
        codes: Vec<String>,
        connection: Option<Arc<dyn Hangup>>,
        feed: impl FnOnce(Arc<[Code]>) -> Feed,
    ) -> Added {
        self.next_id += 1;
        let id = self.next_id;
        *self.per_token.entry(token).or_default() += 1;
        let mut new_codes = false;
        let codes: Arc<[Code]> = codes
            .into_iter()
            .map(|code| {
                let shared = match self.refs.get_key_value(code.as_str()) {
                    Some((shared, _)) => Arc::clone(shared),
                    None => Code::from(code),
                };
                let n = self.refs.entry(Arc::clone(&shared)).or_default();
                new_codes |= *n == 0;
                *n += 1;
                shared
            })
            .collect();
        let feed = Arc::new(feed(codes));
        self.reach = None;
        self.subscribers.insert(
            id,
            Subscriber {
                token,
                feed: Arc::clone(&feed),
                connection,
            },
        );
        let start_loop = !self.polling;
        self.polling = true;
        Added {
            id,
            feed,
            start_loop,
            new_codes,
        }
    }

    /// Unregisters subscriber `id`, if it is still there.
    pub(super) fn remove(&mut self, id: u64) -> bool {
        let Some(sub) = self.subscribers.remove(&id) else {
            return false;
        };
        self.reach = None;
        // Thousands of streams grew the table; give the room back once they have
        // gone (amortised: only when three quarters are free).
        if self.subscribers.capacity() > 64
            && self.subscribers.len() * 4 < self.subscribers.capacity()
        {
            let keep = self.subscribers.len() * 2;
            self.subscribers.shrink_to(keep);
        }
        if let Some(n) = self.per_token.get_mut(&sub.token) {
            *n -= 1;
            if *n == 0 {
                self.per_token.remove(&sub.token);
            }
        }
        for code in sub.feed.codes.iter() {
            if let Some(n) = self.refs.get_mut(&**code) {
                *n -= 1;
                if *n == 0 {
                    self.refs.remove(code);
                }
            }
        }
        true
    }

    /// Codes in the union.
    pub(super) fn codes(&self) -> usize {
        self.refs.len()
    }

    /// The shared copy of `code`, while someone is subscribed to it.
    pub(super) fn shared(&self, code: &str) -> Option<Code> {
        self.refs.get_key_value(code).map(|(k, _)| Arc::clone(k))
    }

    /// The union of every subscriber's codes (the shared copies).
    pub(super) fn union(&self) -> Vec<Code> {
        self.refs.keys().cloned().collect()
    }

    /// Whom the fan-out reaches (built again only after a change).
    pub(super) fn reach(&mut self) -> Arc<Reach> {
        let subscribers = &self.subscribers;
        let reach = self.reach.get_or_insert_with(|| {
            let mut reach = Reach::default();
            let mut woken = Vec::new();
            for s in subscribers.values() {
                if s.feed.outlet.is_some() {
                    reach.outlets.push(Arc::clone(&s.feed));
                } else {
                    let key = s.connection.as_ref().map_or(0, |c| c.connection_key());
                    woken.push((key, Arc::clone(&s.feed)));
                }
            }
            woken.sort_unstable_by_key(|(key, _)| *key);
            reach.woken = woken.into_iter().map(|(_, feed)| feed).collect();
            Arc::new(reach)
        });
        Arc::clone(reach)
    }

    /// The connections of every stream opened with one of `tokens`.
    pub(super) fn connections_of<'a>(
        &'a self,
        tokens: &'a [usize],
    ) -> impl Iterator<Item = &'a Arc<dyn Hangup>> + 'a {
        self.subscribers
            .values()
            .filter(|s| tokens.contains(&s.token))
            .filter_map(|s| s.connection.as_ref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn add(reg: &mut Registry, token: usize, codes: &[&str]) -> Added {
        let codes = codes.iter().map(|c| (*c).to_owned()).collect();
        reg.add(token, codes, None, |codes| {
            Feed::new(codes, 20, 0, None, 0, 15_000)
        })
    }

    #[derive(Debug)]
    struct Connection;

    impl Hangup for Connection {
        fn close(&self) {}

        fn is_closed(&self) -> bool {
            false
        }
    }

    /// The streams the fan-out wakes come grouped by connection, however their
    /// subscriptions interleaved, and the grouping follows a stream's leaving.
    #[test]
    fn woken_streams_come_grouped_by_connection() {
        let mut reg = Registry::default();
        // Four connections, ten streams each, subscribed in turn: an order that
        // came out grouped by chance would be one in billions.
        let conns: Vec<Arc<dyn Hangup>> = (0..4)
            .map(|_| Arc::new(Connection) as Arc<dyn Hangup>)
            .collect();
        let ids: Vec<u64> = (0..40)
            .map(|i| &conns[i % conns.len()])
            .map(|conn| {
                let codes = vec!["600519".to_owned()];
                reg.add(1, codes, Some(Arc::clone(conn)), |codes| {
                    Feed::new(codes, 20, 0, None, 0, 15_000)
                })
                .id
            })
            .collect();
        let keys = |reg: &mut Registry| -> Vec<usize> {
            let reach = reg.reach();
            assert!(reach.outlets.is_empty());
            reach
                .woken
                .iter()
                .map(|feed| {
                    let sub = reg
                        .subscribers
                        .values()
                        .find(|s| Arc::ptr_eq(&s.feed, feed));
                    sub.and_then(|s| s.connection.as_ref())
                        .unwrap()
                        .connection_key()
                })
                .collect()
        };
        let grouped = |keys: &[usize]| keys.windows(2).filter(|w| w[0] != w[1]).count() == 3;
        let all = keys(&mut reg);
        assert_eq!(all.len(), 40);
        assert!(grouped(&all), "{all:?}");
        reg.remove(ids[2]);
        let fewer = keys(&mut reg);
        assert_eq!(fewer.len(), 39, "built again after the change");
        assert!(grouped(&fewer), "{fewer:?}");
    }

    /// Every subscriber of a code shares one copy of it; the union counts each code
    /// once and drops it with its last subscriber; limits count per token and in all.
    #[test]
    fn the_union_shares_codes_and_limits_count() {
        let mut reg = Registry::default();
        let config = HubConfig {
            max_streams: 3,
            max_streams_per_token: 2,
            ..HubConfig::default()
        };
        let a = add(&mut reg, 1, &["600519", "000001"]);
        assert!(a.start_loop && a.new_codes);
        let b = add(&mut reg, 1, &["000001"]);
        assert!(
            !b.start_loop && !b.new_codes,
            "000001 is in the union already"
        );
        assert!(Arc::ptr_eq(&a.feed.codes[1], &b.feed.codes[0]), "one copy");
        assert_eq!(reg.codes(), 2);
        assert!(matches!(
            reg.admit(1, &config),
            Err(Error::RateLimited { .. })
        ));
        assert!(reg.admit(2, &config).is_ok());
        add(&mut reg, 2, &["300750"]);
        assert!(matches!(
            reg.admit(3, &config),
            Err(Error::Overloaded { .. })
        ));
        assert!(reg.remove(a.id));
        assert!(!reg.remove(a.id), "once");
        let union = reg.union();
        let union: Vec<&str> = union.iter().map(|c| &**c).collect();
        assert_eq!(union, ["000001", "300750"]);
        assert!(reg.admit(1, &config).is_ok(), "the token's slot came back");
    }
}
