//! `[cluster]`: the keys of the link to Redis (one URL, sentinels, or the seed
//! nodes of a Redis Cluster), its TLS and its ACL user.

use serde::{Deserialize, Serialize};

use super::Secret;
use super::problem::Problem;

/// What `cluster.redis_url` must look like (said by `check-config` and by `serve`).
pub const REDIS_URL_FORM: &str =
    "must be a redis://[[user]:password@]host:port/db URL (rediss:// for TLS)";

/// `[cluster]`: several nodes as one cache toward the upstream, on Redis.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClusterConfig {
    /// `redis://[[user]:password@]host:port/db`, or `rediss://` for TLS; empty (and
    /// no `sentinels`): a single node, as without it. A secret (its password is
    /// never shown).
    pub redis_url: Secret,
    /// How Redis is reached: `single` (`redis_url`), `sentinel` (`sentinels`) or
    /// `cluster` (a Redis Cluster, `nodes`); empty: whichever of the three is set.
    pub mode: String,
    /// Seed nodes of a Redis Cluster (`redis://host:port` or `rediss://`, without
    /// credentials: those go in `username` and `password`); the others are found
    /// from them. Entries spread over the shards; events travel on sharded pub/sub
    /// (Redis 7 or Valkey 7.2 and later; the classic kind where the servers lack it).
    pub nodes: Vec<String>,
    /// Sentinels (`host:port`) that name the master in place of `redis_url`: asked
    /// on every (re)connect, so that the nodes follow a failover by themselves.
    pub sentinels: Vec<String>,
    /// The master's name the sentinels watch (`sentinel monitor <name> ...`).
    pub sentinel_master: String,
    /// ACL user on the sentinels (empty: none, or `default`).
    pub sentinel_username: String,
    /// Password on the sentinels (`requirepass` of sentinel.conf). A secret.
    pub sentinel_password: Secret,
    /// TLS to the sentinels too (their `tls-port`), checked against the same CA
    /// and with the same client certificate as the master's.
    pub sentinel_tls: bool,
    /// ACL user on Redis (empty: the URL's, or `default`).
    pub username: String,
    /// Password on Redis, in place of the URL's (which it may not repeat); env
    /// `MDPROXY_CLUSTER_PASSWORD`. A secret.
    pub password: Secret,
    /// TLS to the master the sentinels name (with `redis_url`, `rediss://` says it).
    pub tls: bool,
    /// PEM file of the CA(s) Redis's certificate is checked against; empty: the
    /// system's roots.
    pub tls_ca_file: String,
    /// PEM file of a client certificate for Redis (with `tls_key_file`).
    pub tls_cert_file: String,
    /// PEM file of the client certificate's private key.
    pub tls_key_file: String,
    /// This node's name in the cluster; empty: host name and process id.
    pub node_id: String,
    /// Largest answer shared through Redis; larger ones stay in the node's cache.
    pub max_l2_body_bytes: usize,
    /// Every Redis operation's time limit; past it the node works alone for the
    /// moment.
    pub timeout_ms: u64,
    /// The nodes a node counts until Redis first answers: a node that starts while
    /// Redis is away takes this share of the upstream budget (1: the whole of it),
    /// so a fleet restarted during an outage does not send `nodes` times the
    /// budget. Once Redis has answered, the last count it gave is used instead,
    /// and while it is below this the nodes on Redis draw only that part of the
    /// fleet's budget (a node missing may be cut off, working on its own share).
    pub expected_nodes: u64,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            redis_url: Secret::new(""),
            mode: String::new(),
            nodes: Vec::new(),
            sentinels: Vec::new(),
            sentinel_master: String::new(),
            sentinel_username: String::new(),
            sentinel_password: Secret::new(""),
            sentinel_tls: false,
            username: String::new(),
            password: Secret::new(""),
            tls: false,
            tls_ca_file: String::new(),
            tls_cert_file: String::new(),
            tls_key_file: String::new(),
            node_id: String::new(),
            max_l2_body_bytes: 8 * 1024 * 1024,
            timeout_ms: 250,
            expected_nodes: 1,
        }
    }
}

impl ClusterConfig {
    /// Whether this node is one of a cluster (a Redis URL, sentinels or the nodes
    /// of a Redis Cluster are set).
    pub fn is_enabled(&self) -> bool {
        !self.redis_url.is_empty() || !self.sentinels.is_empty() || !self.nodes.is_empty()
    }

    /// Whether Redis is a Redis Cluster (`nodes`): keys a script reads together
    /// share a hash tag, and events travel on sharded pub/sub.
    pub fn is_redis_cluster(&self) -> bool {
        !self.nodes.is_empty()
    }

    /// The sentinels' hosts and ports (those that are `host:port`).
    pub fn sentinel_addrs(&self) -> Vec<(String, u16)> {
        self.sentinels
            .iter()
            .filter_map(|s| sentinel_addr(s))
            .collect()
    }

    /// Whether the link to Redis is TLS (`rediss://`, or `tls` with sentinels), or
    /// to the sentinels (`sentinel_tls`).
    pub fn uses_tls(&self) -> bool {
        self.tls
            || self.sentinel_tls
            || self.redis_url.expose().starts_with("rediss://")
            || self.nodes.iter().any(|n| n.starts_with("rediss://"))
    }
}

impl ClusterConfig {
    /// What `serve` can connect to, and nothing else; every message leaves the URL
    /// and the passwords out.
    pub(super) fn problems(&self, problems: &mut Vec<Problem>) {
        let mut problem = |key: &str, why: &str| problems.push(Problem::new(key, why));
        let url = self.redis_url.expose();
        let parsed = if url.is_empty() {
            None
        } else if !(url.starts_with("redis://") || url.starts_with("rediss://")) {
            problem("cluster.redis_url", REDIS_URL_FORM);
            None
        } else {
            match redis::IntoConnectionInfo::into_connection_info(url) {
                Ok(info) => Some(info),
                Err(_) => {
                    problem("cluster.redis_url", REDIS_URL_FORM);
                    None
                }
            }
        };
        if let Some(info) = &parsed {
            if info.redis.password.is_some() && !self.password.is_empty() {
                problem(
                    "cluster.password",
                    "is set and cluster.redis_url carries a password too: give it once",
                );
            }
            if info.redis.username.is_some() && !self.username.is_empty() {
                problem(
                    "cluster.username",
                    "is set and cluster.redis_url names a user too: give it once",
                );
            }
        }
        if self.tls && !url.is_empty() {
            problem(
                "cluster.tls",
                "is for sentinels; with cluster.redis_url the scheme says it (rediss://)",
            );
        }
        if !url.is_empty() && !self.sentinels.is_empty() {
            problem(
                "cluster.sentinels",
                "and cluster.redis_url are both set: the master is found one way (sentinels) or the other (a URL)",
            );
        }
        self.mode_problems(&mut problem);
        for (n, sentinel) in self.sentinels.iter().enumerate() {
            if sentinel_addr(sentinel).is_none() {
                // Not shown: an entry written as a URL may hold a password.
                problem(
                    "cluster.sentinels",
                    &format!("entry {} is not host:port", n + 1),
                );
            }
        }
        if self
            .node_id
            .chars()
            .any(|c| c.is_whitespace() || c.is_control())
        {
            // The fleet's messages are fields separated by spaces: one in a node's
            // name cuts every pause and slow-down it sends.
            problem(
                "cluster.node_id",
                "has a space or a control character: the fleet's messages could not be read",
            );
        }
        match (self.sentinels.is_empty(), self.sentinel_master.is_empty()) {
            (false, true) => problem(
                "cluster.sentinel_master",
                "is empty: the sentinels need the name of the master they watch",
            ),
            (true, false) => problem(
                "cluster.sentinel_master",
                "is set but cluster.sentinels is empty",
            ),
            _ => {}
        }
        if self.sentinels.is_empty() && self.sentinel_tls {
            problem(
                "cluster.sentinel_tls",
                "is set but cluster.sentinels is empty",
            );
        }
        if self.sentinels.is_empty()
            && (!self.sentinel_username.is_empty() || !self.sentinel_password.is_empty())
        {
            problem(
                "cluster.sentinel_password",
                "or cluster.sentinel_username is set but cluster.sentinels is empty",
            );
        }
        if self.tls_cert_file.is_empty() != self.tls_key_file.is_empty() {
            problem(
                "cluster.tls_cert_file",
                "and cluster.tls_key_file go together (a client certificate and its key)",
            );
        }
        let files = [&self.tls_ca_file, &self.tls_cert_file, &self.tls_key_file];
        if !self.uses_tls() && files.iter().any(|f| !f.is_empty()) {
            problem(
                "cluster.tls_ca_file",
                "or another tls_ file is set but the link is not TLS (rediss://, or cluster.tls with sentinels)",
            );
        }
    }
}

impl ClusterConfig {
    /// `mode` names one way, and the keys of that way (and no other) are set;
    /// every seed node is a plain URL. No message repeats a URL.
    fn mode_problems(&self, problem: &mut impl FnMut(&str, &str)) {
        let ways = [
            ("single", !self.redis_url.is_empty()),
            ("sentinel", !self.sentinels.is_empty()),
            ("cluster", !self.nodes.is_empty()),
        ];
        match self.mode.as_str() {
            "" => {}
            "single" | "sentinel" | "cluster" => {
                let key = match self.mode.as_str() {
                    "single" => "cluster.redis_url",
                    "sentinel" => "cluster.sentinels",
                    _ => "cluster.nodes",
                };
                if !ways.iter().any(|(way, set)| *way == self.mode && *set) {
                    problem(
                        key,
                        &format!("is empty: cluster.mode = {:?} needs it", self.mode),
                    );
                }
            }
            _ => problem(
                "cluster.mode",
                "must be \"single\" (redis_url), \"sentinel\" (sentinels) or \"cluster\" (nodes)",
            ),
        }
        if self.nodes.is_empty() {
            return;
        }
        if !self.redis_url.is_empty() || !self.sentinels.is_empty() {
            problem(
                "cluster.nodes",
                "is set with cluster.redis_url or cluster.sentinels: Redis is reached one way",
            );
        }
        if self.tls {
            problem(
                "cluster.tls",
                "is for sentinels; with cluster.nodes the scheme says it (rediss://)",
            );
        }
        let mut schemes = std::collections::BTreeSet::new();
        for (i, node) in self.nodes.iter().enumerate() {
            let key = format!("cluster.nodes[{i}]");
            let Some((scheme, _)) = node.split_once("://") else {
                problem(&key, "is not a redis://host:port URL (rediss:// for TLS)");
                continue;
            };
            schemes.insert(scheme.to_owned());
            match redis::IntoConnectionInfo::into_connection_info(node.as_str()) {
                Ok(info) if matches!(scheme, "redis" | "rediss") => {
                    if info.redis.password.is_some() || info.redis.username.is_some() {
                        problem(
                            &key,
                            "carries credentials: give them in cluster.username and cluster.password (or MDPROXY_CLUSTER_PASSWORD)",
                        );
                    }
                    if info.redis.db != 0 {
                        problem(&key, "names a database: a Redis Cluster has only 0");
                    }
                }
                _ => problem(&key, "is not a redis://host:port URL (rediss:// for TLS)"),
            }
        }
        if schemes.len() > 1 {
            problem(
                "cluster.nodes",
                "mix redis:// and rediss://: the whole cluster is TLS or none of it",
            );
        }
    }
}

/// `host:port` of a sentinel, when it is one.
fn sentinel_addr(text: &str) -> Option<(String, u16)> {
    let (host, port) = text.rsplit_once(':')?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let port = port.parse::<u16>().ok().filter(|p| *p > 0)?;
    (!host.is_empty()).then(|| (host.to_owned(), port))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problems(config: ClusterConfig) -> String {
        let mut found = Vec::new();
        config.problems(&mut found);
        found
            .iter()
            .map(|p| format!("{}: {}", p.key.as_deref().unwrap_or(""), p.message))
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn sentinels() -> ClusterConfig {
        ClusterConfig {
            sentinels: vec!["127.0.0.1:26379".into(), "[::1]:26380".into()],
            sentinel_master: "mymaster".into(),
            ..ClusterConfig::default()
        }
    }

    /// Sentinels with a master name, TLS by URL or by `tls`, a client certificate
    /// with its key: all fine.
    #[test]
    fn sound_sentinel_and_tls_settings_pass() {
        assert_eq!(problems(sentinels()), "");
        assert_eq!(
            sentinels().sentinel_addrs(),
            [("127.0.0.1".to_owned(), 26379), ("::1".to_owned(), 26380)]
        );
        assert_eq!(
            problems(ClusterConfig {
                tls: true,
                tls_ca_file: "ca.pem".into(),
                tls_cert_file: "c.pem".into(),
                tls_key_file: "k.pem".into(),
                username: "u".into(),
                password: Secret::new("p"),
                ..sentinels()
            }),
            ""
        );
        assert_eq!(
            problems(ClusterConfig {
                redis_url: Secret::new("rediss://127.0.0.1:6380/0"),
                tls_ca_file: "ca.pem".into(),
                username: "u".into(),
                password: Secret::new("p"),
                ..ClusterConfig::default()
            }),
            ""
        );
    }

    /// Each contradiction is refused by key, and no message holds a password.
    #[test]
    fn contradictions_are_refused_by_key_without_secrets() {
        let cases = [
            (
                ClusterConfig {
                    redis_url: Secret::new("redis://:url-pw@h:1/0"),
                    ..sentinels()
                },
                "cluster.sentinels",
            ),
            (
                ClusterConfig {
                    sentinel_master: String::new(),
                    ..sentinels()
                },
                "cluster.sentinel_master",
            ),
            (
                ClusterConfig {
                    sentinels: vec!["no-port".into()],
                    ..sentinels()
                },
                "cluster.sentinels",
            ),
            (
                ClusterConfig {
                    sentinel_master: "m".into(),
                    ..ClusterConfig::default()
                },
                "cluster.sentinel_master",
            ),
            (
                ClusterConfig {
                    redis_url: Secret::new("redis://:url-pw@h:1/0"),
                    password: Secret::new("cfg-pw"),
                    ..ClusterConfig::default()
                },
                "cluster.password",
            ),
            (
                ClusterConfig {
                    redis_url: Secret::new("redis://:url-pw@h:1/0"),
                    tls_ca_file: "ca.pem".into(),
                    ..ClusterConfig::default()
                },
                "cluster.tls_ca_file",
            ),
            (
                ClusterConfig {
                    redis_url: Secret::new("rediss://:url-pw@h:1/0"),
                    tls_cert_file: "c.pem".into(),
                    ..ClusterConfig::default()
                },
                "cluster.tls_cert_file",
            ),
            (
                ClusterConfig {
                    redis_url: Secret::new("rediss://:url-pw@h:1/0"),
                    tls: true,
                    ..ClusterConfig::default()
                },
                "cluster.tls",
            ),
            (
                ClusterConfig {
                    sentinel_password: Secret::new("s-pw"),
                    ..ClusterConfig::default()
                },
                "cluster.sentinel_password",
            ),
            (
                ClusterConfig {
                    sentinel_tls: true,
                    ..ClusterConfig::default()
                },
                "cluster.sentinel_tls",
            ),
        ];
        for (config, key) in cases {
            let found = problems(config);
            assert!(found.starts_with(key), "{key}: {found}");
            for secret in ["url-pw", "cfg-pw", "s-pw"] {
                assert!(!found.contains(secret), "{found}");
            }
        }
    }

    fn redis_cluster() -> ClusterConfig {
        ClusterConfig {
            mode: "cluster".into(),
            nodes: vec!["redis://127.0.0.1:7000".into(), "redis://[::1]:7001".into()],
            ..ClusterConfig::default()
        }
    }

    /// The seed nodes of a Redis Cluster, with or without `mode`, with TLS by
    /// scheme and the ACL user given apart: fine.
    #[test]
    fn sound_redis_cluster_settings_pass() {
        assert_eq!(problems(redis_cluster()), "");
        assert!(redis_cluster().is_enabled() && redis_cluster().is_redis_cluster());
        assert_eq!(
            problems(ClusterConfig {
                mode: String::new(),
                nodes: vec![
                    "rediss://10.0.0.1:7000".into(),
                    "rediss://10.0.0.2:7000".into()
                ],
                tls_ca_file: "ca.pem".into(),
                username: "u".into(),
                password: Secret::new("p"),
                ..ClusterConfig::default()
            }),
            ""
        );
        assert_eq!(
            problems(ClusterConfig {
                mode: "single".into(),
                redis_url: Secret::new("redis://127.0.0.1:6379/0"),
                ..ClusterConfig::default()
            }),
            ""
        );
        assert_eq!(
            problems(ClusterConfig {
                mode: "sentinel".into(),
                ..sentinels()
            }),
            ""
        );
    }

    /// A mode that is not one, a mode without its keys, two ways at once, seed
    /// nodes with credentials, a database or mixed schemes: refused by key, and no
    /// message repeats a URL or a password.
    #[test]
    fn redis_cluster_contradictions_are_refused_by_key() {
        let cases = [
            (
                ClusterConfig {
                    mode: "replicated".into(),
                    ..redis_cluster()
                },
                "cluster.mode",
            ),
            (
                ClusterConfig {
                    nodes: Vec::new(),
                    redis_url: Secret::new("redis://h:1/0"),
                    ..redis_cluster()
                },
                "cluster.nodes",
            ),
            (
                ClusterConfig {
                    mode: "sentinel".into(),
                    ..redis_cluster()
                },
                "cluster.sentinels",
            ),
            (
                ClusterConfig {
                    redis_url: Secret::new("redis://:url-pw@h:1/0"),
                    mode: String::new(),
                    ..redis_cluster()
                },
                "cluster.nodes",
            ),
            (
                ClusterConfig {
                    nodes: vec!["redis://:node-pw@h:7000".into()],
                    ..redis_cluster()
                },
                "cluster.nodes[0]",
            ),
            (
                ClusterConfig {
                    nodes: vec!["redis://h:7000".into(), "redis://h:7001/3".into()],
                    ..redis_cluster()
                },
                "cluster.nodes[1]",
            ),
            (
                ClusterConfig {
                    nodes: vec!["h:7000".into()],
                    ..redis_cluster()
                },
                "cluster.nodes[0]",
            ),
            (
                ClusterConfig {
                    nodes: vec!["redis://h:7000".into(), "rediss://h:7001".into()],
                    ..redis_cluster()
                },
                "cluster.nodes",
            ),
            (
                ClusterConfig {
                    tls: true,
                    ..redis_cluster()
                },
                "cluster.tls",
            ),
        ];
        for (config, key) in cases {
            let found = problems(config);
            assert!(found.starts_with(key), "{key}: {found}");
            for secret in ["url-pw", "node-pw", "h:7000", "h:7001", "h:1/0"] {
                assert!(!found.contains(secret), "{found}");
            }
        }
    }
}
