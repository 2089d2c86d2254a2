//! The one place that makes (and remakes) the links to Redis: the data connection
//! every operation runs on, and the subscription the events arrive on, to one Redis
//! by URL, to the master the sentinels name at each (re)connect, or to a Redis
//! Cluster from its seed nodes (the crate follows its slots and failovers; events
//! on sharded pub/sub); TLS and the ACL user apply to each. What differs between
//! one Redis and a Cluster for the parts (a `SCAN` of every master, the masters in
//! use) is answered here, behind [`Connection`].

use std::time::Duration;

use futures_util::StreamExt;
use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{
    ClientTlsConfig, ConnectionAddr, ConnectionInfo, IntoConnectionInfo, ProtocolVersion,
    RedisConnectionInfo, TlsCertificates, TlsMode,
};

use mdproxy_config::{ClusterConfig, REDIS_URL_FORM, Secret};

/// The data connection: cheap to clone, every clone shares one link.
#[derive(Clone)]
pub(crate) enum Connection {
    /// One Redis, reconnected by the manager.
    Single(ConnectionManager),
    /// A Redis Cluster: each command goes to the shard of its key.
    Cluster(ClusterConnection),
    /// A scripted conversation (unit tests).
    #[cfg(test)]
    Mock(redis_test::MockRedisConnection),
}

impl redis::aio::ConnectionLike for Connection {
    fn req_packed_command<'a>(
        &'a mut self,
        cmd: &'a redis::Cmd,
    ) -> redis::RedisFuture<'a, redis::Value> {
        match self {
            Connection::Single(c) => c.req_packed_command(cmd),
            Connection::Cluster(c) => c.req_packed_command(cmd),
            #[cfg(test)]
            Connection::Mock(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        match self {
            Connection::Single(c) => c.req_packed_commands(cmd, offset, count),
            Connection::Cluster(c) => c.req_packed_commands(cmd, offset, count),
            #[cfg(test)]
            Connection::Mock(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Connection::Single(c) => c.get_db(),
            Connection::Cluster(c) => c.get_db(),
            #[cfg(test)]
            Connection::Mock(c) => redis::aio::ConnectionLike::get_db(c),
        }
    }
}

impl Connection {
    /// One round of `SCAN ... MATCH pattern COUNT count` from where `scan` is: the
    /// keys it found. On a Redis Cluster the rounds go through every master in turn
    /// (found at the first round), each from cursor 0.
    ///
    /// # Errors
    /// Redis's, when a master cannot be asked.
    pub(crate) async fn scan_round(
        &mut self,
        scan: &mut Scan,
        pattern: &str,
        count: usize,
    ) -> redis::RedisResult<Vec<Vec<u8>>> {
        let mut cmd = redis::cmd("SCAN");
        cmd.arg(scan.cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(count);
        let Connection::Cluster(cluster) = self else {
            let (next, keys): (u64, Vec<Vec<u8>>) = cmd.query_async(self).await?;
            scan.cursor = next;
            scan.done = next == 0;
            return Ok(keys);
        };
        if scan.masters.is_none() {
            scan.masters = Some(masters_of(cluster).await?);
        }
        let masters = scan.masters.as_mut().expect("just found");
        let Some((host, port)) = masters.first().cloned() else {
            scan.done = true;
            return Ok(Vec::new());
        };
        let on = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress { host, port });
        let (next, keys): (u64, Vec<Vec<u8>>) =
            redis::from_owned_redis_value(cluster.route_command(&cmd, on).await?)?;
        if next == 0 {
            masters.remove(0);
            scan.done = masters.is_empty();
        }
        scan.cursor = next;
        Ok(keys)
    }
}

/// Where a `SCAN` of the keyspace is.
#[derive(Debug, Default)]
pub(crate) struct Scan {
    /// A Redis Cluster's masters still to visit, the one being scanned first (`None`
    /// before the first round, and on one Redis).
    masters: Option<Vec<(String, u16)>>,
    cursor: u64,
    done: bool,
}

impl Scan {
    /// Whether every key has been seen.
    pub(crate) fn is_done(&self) -> bool {
        self.done
    }
}

/// Slots of a Redis Cluster.
const SLOTS: usize = 16_384;

/// The masters of a Redis Cluster that serve slots and are not failing, sorted,
/// from `CLUSTER NODES` (asked of any node).
///
/// # Errors
/// Redis's; and one of ours while some slots have no serving master (a shard's
/// failover under way): a session begun then would be wrong about the masters.
async fn masters_of(cluster: &mut ClusterConnection) -> redis::RedisResult<Vec<(String, u16)>> {
    let nodes: String = redis::cmd("CLUSTER")
        .arg("NODES")
        .query_async(cluster)
        .await?;
    let (masters, served) = masters_in(&nodes);
    if served < SLOTS {
        return Err(redis::RedisError::from((
            redis::ErrorKind::ClusterDown,
            "some slots have no serving master (a failover under way)",
        )));
    }
    Ok(masters)
}

/// The serving masters in the text of `CLUSTER NODES` (`<id> <ip:port@cport[,host]>
/// <flags> <master> <ping> <pong> <epoch> <link> <slot>...`, one node a line), and
/// how many slots they serve.
fn masters_in(nodes: &str) -> (Vec<(String, u16)>, usize) {
    let mut served = 0;
    let mut masters: Vec<(String, u16)> = nodes
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let flags = fields.get(2)?;
            let serving = fields.len() > 8
                && flags.split(',').any(|f| f == "master")
                && !flags.contains("fail");
            if !serving {
                return None;
            }
            served += fields[8..]
                .iter()
                .map(|range| slots_in(range))
                .sum::<usize>();
            let addr = fields[1].split(['@', ',']).next()?;
            let (host, port) = addr.rsplit_once(':')?;
            let host = host.trim_start_matches('[').trim_end_matches(']');
            Some((host.to_owned(), port.parse().ok()?))
        })
        .collect();
    masters.sort();
    (masters, served)
}

/// Slots in one slot field of `CLUSTER NODES`: `5461-10922`, `42`, or a slot being
/// moved (`[42->-id]`, counted where it is now: not here).
fn slots_in(field: &str) -> usize {
    let range = |text: &str| text.parse::<usize>().ok();
    match field.split_once('-') {
        _ if field.starts_with('[') => 0,
        Some((first, last)) => match (range(first), range(last)) {
            (Some(first), Some(last)) if last >= first => last - first + 1,
            _ => 0,
        },
        None => usize::from(range(field).is_some()),
    }
}

/// `host:port` of each, joined by commas: what status pages show of a Cluster.
fn addresses(masters: &[(String, u16)]) -> String {
    masters
        .iter()
        .map(|(host, port)| address(&ConnectionAddr::Tcp(host.clone(), *port)))
        .collect::<Vec<_>>()
        .join(",")
}

/// Where Redis is: one address, whatever the sentinels name now, or a Cluster
/// found from its seed nodes.
enum Target {
    /// `redis_url` (with `username`, `password` and the TLS files applied).
    Url(redis::Client),
    /// Asked on every (re)connect; one lookup at a time.
    Sentinel(tokio::sync::Mutex<SentinelClient>),
    /// A Redis Cluster: a client is built per session (its subscription's pushes
    /// go to that session).
    Cluster(ClusterSeeds),
}

/// Why `[cluster]` cannot be connected to, naming the key (never a URL's
/// password or a secret).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("cluster.{key}: {reason}")]
pub struct ClusterError {
    /// The key of `[cluster]` at fault (`redis_url`, `nodes[1]`, `tls_ca_file`).
    pub key: String,
    pub reason: String,
}

impl ClusterError {
    fn new(key: impl Into<String>, reason: impl Into<String>) -> ClusterError {
        ClusterError {
            key: key.into(),
            reason: reason.into(),
        }
    }
}

/// What a Redis Cluster's client is built from.
struct ClusterSeeds {
    nodes: Vec<ConnectionInfo>,
    username: String,
    password: Secret,
    certificates: Option<TlsCertificates>,
}

impl ClusterSeeds {
    fn of(
        config: &ClusterConfig,
        certificates: Option<TlsCertificates>,
    ) -> Result<Self, ClusterError> {
        let nodes = config
            .nodes
            .iter()
            .enumerate()
            .map(|(i, node)| {
                node.as_str().into_connection_info().map_err(|_| {
                    ClusterError::new(format!("nodes[{i}]"), "not a redis://host:port URL")
                })
            })
            .collect::<Result<Vec<_>, ClusterError>>()?;
        Ok(ClusterSeeds {
            nodes,
            username: config.username.clone(),
            password: config.password.clone(),
            certificates,
        })
    }

    /// A client whose pushes (the subscription's messages) go to `pushes`.
    fn client(
        &self,
        timeout: Duration,
        pushes: tokio::sync::mpsc::UnboundedSender<redis::PushInfo>,
    ) -> redis::RedisResult<redis::cluster::ClusterClient> {
        let mut builder = ClusterClientBuilder::new(self.nodes.clone())
            .use_protocol(ProtocolVersion::RESP3)
            .push_sender(pushes)
            .connection_timeout(timeout)
            .response_timeout(timeout)
            .retries(1);
        if !self.username.is_empty() {
            builder = builder.username(self.username.clone());
        }
        if !self.password.is_empty() {
            builder = builder.password(self.password.expose().to_owned());
        }
        if let Some(certificates) = &self.certificates {
            builder = builder.certs(certificates.clone());
        }
        builder.build()
    }
}

/// Makes the links to the Redis of `[cluster]`.
pub(crate) struct Connector {
    target: Target,
    /// Connecting and every answer are bounded by it (`cluster.timeout_ms`).
    timeout: Duration,
    /// A sentinel lookup is bounded by this (each sentinel, then the master).
    lookup_timeout: Duration,
}

/// The links of one session with Redis, and where they go.
pub(crate) struct Session {
    /// The data connection.
    pub(crate) conn: Connection,
    /// The events of the subscription, as they arrive (the stream ends with the
    /// subscription of one Redis; a Cluster's client resubscribes by itself).
    pub(crate) messages: BoxStream<'static, redis::Msg>,
    /// `host:port` of the Redis in use, or of a Cluster's masters, comma-separated
    /// (never a credential).
    pub(crate) address: String,
    /// The events travel on sharded pub/sub (a Redis Cluster whose servers have
    /// it): publications go out with `SPUBLISH`.
    pub(crate) sharded_pubsub: bool,
    /// Asks the subscription's own connection for an answer (a `PING` on it): a
    /// connection gone half-open (the peer vanished without a FIN or RST) carries
    /// no message and reports no error, so the listener asks now and then. `None`
    /// on a Redis Cluster, whose pushes come on the data connection.
    pub(crate) probe: Option<Probe>,
}

/// One question to a subscription's connection: `Ok` when it answered within
/// `cluster.timeout_ms`.
pub(crate) type Probe = Box<dyn Fn() -> BoxFuture<'static, redis::RedisResult<()>> + Send + Sync>;

/// The probe of a subscription's connection, through its sink.
fn probe_of(sink: redis::aio::PubSubSink, timeout: Duration) -> Probe {
    Box::new(move || {
        let mut sink = sink.clone();
        Box::pin(async move {
            tokio::time::timeout(timeout, sink.ping::<redis::Value>())
                .await
                .map_err(|_| timed_out())?
                .map(drop)
        })
    })
}

impl Connector {
    /// The connector of `config`; reads the TLS files it names.
    ///
    /// # Errors
    /// When `redis_url` is no URL this build can connect to, or a TLS file cannot
    /// be read (the message never holds the URL or a password).
    pub(crate) fn new(config: &ClusterConfig) -> Result<Connector, ClusterError> {
        let certificates = certificates(config)?;
        let target = if config.is_redis_cluster() {
            Target::Cluster(ClusterSeeds::of(config, certificates)?)
        } else if config.sentinels.is_empty() {
            Target::Url(url_client(config, certificates)?)
        } else {
            Target::Sentinel(tokio::sync::Mutex::new(sentinel_client(
                config,
                certificates,
            )?))
        };
        let timeout = Duration::from_millis(config.timeout_ms);
        let steps =
            u32::try_from(config.sentinels.len().max(config.nodes.len())).unwrap_or(u32::MAX);
        Ok(Connector {
            target,
            timeout,
            lookup_timeout: timeout.saturating_mul(steps.saturating_add(2)),
        })
    }

    /// Whether the master may move (sentinels, a Cluster's shards): a node marked
    /// away then starts a new session (asks the sentinels, or the seeds, again)
    /// rather than waiting for the address it had.
    pub(crate) fn follows_failover(&self) -> bool {
        matches!(self.target, Target::Sentinel(_) | Target::Cluster(_))
    }

    /// A new data connection and a subscription to `channels`, on the master of
    /// now (on a Redis Cluster, on its shards).
    ///
    /// # Errors
    /// Redis's (or the sentinels'), when it cannot be reached, refuses the user or
    /// password, or does not answer within the timeout.
    pub(crate) async fn connect(&self, channels: &[&str]) -> redis::RedisResult<Session> {
        // The client of the master now: the URL's, or the one the sentinels name.
        let client = match &self.target {
            Target::Cluster(seeds) => return self.connect_cluster(seeds, channels).await,
            Target::Url(client) => client.clone(),
            Target::Sentinel(sentinels) => {
                let lookup = async { sentinels.lock().await.async_get_client().await };
                tokio::time::timeout(self.lookup_timeout, lookup)
                    .await
                    .map_err(|_| timed_out())??
            }
        };
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(self.timeout)
            .set_response_timeout(self.timeout)
            .set_number_of_retries(1);
        let conn = ConnectionManager::new_with_config(client.clone(), config).await?;
        let mut pubsub = tokio::time::timeout(self.timeout, client.get_async_pubsub())
            .await
            .map_err(|_| timed_out())??;
        // Bounded too: a Redis that stops answering after the connect would hold
        // the watcher (and the node alone) until the kernel gave up on the socket.
        let subscribed = async {
            for channel in channels {
                pubsub.subscribe(*channel).await?;
            }
            redis::RedisResult::Ok(())
        };
        tokio::time::timeout(self.timeout, subscribed)
            .await
            .map_err(|_| timed_out())??;
        let (sink, messages) = pubsub.split();
        Ok(Session {
            conn: Connection::Single(conn),
            messages: messages.boxed(),
            address: address(&client.get_connection_info().addr),
            sharded_pubsub: false,
            probe: Some(probe_of(sink, self.timeout)),
        })
    }

    /// A session on a Redis Cluster: a client from the seeds, the channels
    /// subscribed on sharded pub/sub (each on its shard's master; the classic kind
    /// where the servers lack it), and the masters in use. Every master must
    /// answer: a session begun while a shard's master is dead and not yet replaced
    /// would fail at its first command on that shard.
    async fn connect_cluster(
        &self,
        seeds: &ClusterSeeds,
        channels: &[&str],
    ) -> redis::RedisResult<Session> {
        let (pushes, arrived) = tokio::sync::mpsc::unbounded_channel();
        let client = seeds.client(self.timeout, pushes)?;
        let session = async {
            let mut conn = client.get_async_connection().await?;
            redis::cmd("PING").query_async::<()>(&mut conn).await?;
            // Sharded where the server has it (Redis 7, Valkey 7.2); a server
            // without it gets the classic kind, which its bus carries to every node.
            let mut sharded = true;
            for channel in channels {
                match conn.ssubscribe(*channel).await {
                    Ok(()) => {}
                    Err(e) if sharded && unknown_command(&e) => {
                        sharded = false;
                        break;
                    }
                    Err(e) => return Err(e),
                }
            }
            if !sharded {
                for channel in channels {
                    conn.subscribe(*channel).await?;
                }
            }
            let masters = masters_of(&mut conn).await?;
            Ok::<_, redis::RedisError>((conn, masters, sharded))
        };
        let (conn, masters, sharded) = tokio::time::timeout(self.lookup_timeout, session)
            .await
            .map_err(|_| timed_out())??;
        let messages = futures_util::stream::unfold(arrived, |mut arrived| async move {
            arrived.recv().await.map(|push| (push, arrived))
        })
        .filter_map(|push| std::future::ready(redis::Msg::from_push_info(push)));
        Ok(Session {
            conn: Connection::Cluster(conn),
            messages: messages.boxed(),
            address: addresses(&masters),
            sharded_pubsub: sharded,
            probe: None,
        })
    }
}

/// `host:port` (or the socket's path) of `addr`: what status pages show.
fn address(addr: &ConnectionAddr) -> String {
    match addr {
        ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => {
            if host.contains(':') {
                format!("[{host}]:{port}")
            } else {
                format!("{host}:{port}")
            }
        }
        ConnectionAddr::Unix(path) => path.display().to_string(),
    }
}

/// The CA and client certificate the TLS files name (`None`: no file, the
/// system's roots and no client certificate).
fn certificates(config: &ClusterConfig) -> Result<Option<TlsCertificates>, ClusterError> {
    let read = |key: &str, path: &str| -> Result<Option<Vec<u8>>, ClusterError> {
        if path.is_empty() {
            return Ok(None);
        }
        std::fs::read(path)
            .map(Some)
            .map_err(|e| ClusterError::new(key, format!("cannot read {path}: {e}")))
    };
    let root_cert = read("tls_ca_file", &config.tls_ca_file)?;
    let client_tls = match (
        read("tls_cert_file", &config.tls_cert_file)?,
        read("tls_key_file", &config.tls_key_file)?,
    ) {
        (Some(client_cert), Some(client_key)) => Some(ClientTlsConfig {
            client_cert,
            client_key,
        }),
        (None, None) => None,
        _ => {
            return Err(ClusterError::new(
                "tls_cert_file",
                "cluster.tls_cert_file and cluster.tls_key_file go together",
            ));
        }
    };
    if root_cert.is_none() && client_tls.is_none() {
        return Ok(None);
    }
    Ok(Some(TlsCertificates {
        client_tls,
        root_cert,
    }))
}

/// The client of `redis_url`, with `username`/`password` laid over the URL's.
fn url_client(
    config: &ClusterConfig,
    certificates: Option<TlsCertificates>,
) -> Result<redis::Client, ClusterError> {
    let refused = || ClusterError::new("redis_url", REDIS_URL_FORM);
    let url = config.redis_url.expose();
    if !(url.starts_with("redis://") || url.starts_with("rediss://")) {
        return Err(refused());
    }
    let mut info = url.into_connection_info().map_err(|_| refused())?;
    credentials(&mut info.redis, &config.username, &config.password);
    let client = match certificates {
        Some(certificates) => redis::Client::build_with_tls(info, certificates),
        None => redis::Client::open(info),
    };
    // The crate's reasons name no secret, but say only what is ours to say.
    client.map_err(|_| {
        ClusterError::new(
            "redis_url",
            "the TLS files do not fit it (rediss:// is needed for them, and PEM files)",
        )
    })
}

/// Lays `username` and `password` over what `info` had (each when set).
fn credentials(info: &mut RedisConnectionInfo, username: &str, password: &Secret) {
    if !username.is_empty() {
        info.username = Some(username.to_owned());
    }
    if !password.is_empty() {
        info.password = Some(password.expose().to_owned());
    }
}

/// The sentinels' client: the sentinels over TLS with `sentinel_tls` (plain TCP
/// otherwise); the master with the ACL user, the password and TLS of `[cluster]`.
fn sentinel_client(
    config: &ClusterConfig,
    certificates: Option<TlsCertificates>,
) -> Result<SentinelClient, ClusterError> {
    let addrs = config.sentinel_addrs().into_iter().map(|(host, port)| {
        if config.sentinel_tls {
            ConnectionAddr::TcpTls {
                host,
                port,
                insecure: false,
                tls_params: None,
            }
        } else {
            ConnectionAddr::Tcp(host, port)
        }
    });
    let mut builder = SentinelClientBuilder::new(
        addrs,
        config.sentinel_master.clone(),
        SentinelServerType::Master,
    )
    .map_err(|_| ClusterError::new("sentinels", "no sentinel to ask"))?;
    if !config.username.is_empty() {
        builder = builder.set_client_to_redis_username(config.username.clone());
    }
    if !config.password.is_empty() {
        builder = builder.set_client_to_redis_password(config.password.expose().to_owned());
    }
    if !config.sentinel_username.is_empty() {
        builder = builder.set_client_to_sentinel_username(config.sentinel_username.clone());
    }
    if !config.sentinel_password.is_empty() {
        builder =
            builder.set_client_to_sentinel_password(config.sentinel_password.expose().to_owned());
    }
    if config.sentinel_tls {
        builder = builder.set_client_to_sentinel_tls_mode(TlsMode::Secure);
        if let Some(certificates) = &certificates {
            builder = builder.set_client_to_sentinel_certificates(certificates.clone());
        }
    }
    if config.tls {
        builder = builder.set_client_to_redis_tls_mode(TlsMode::Secure);
        if let Some(certificates) = certificates {
            builder = builder.set_client_to_redis_certificates(certificates);
        }
    }
    builder
        .build()
        .map_err(|_| ClusterError::new("sentinels", "not a list of host:port"))
}

/// Whether `e` is a server's refusal of a command it does not know (one older
/// than the command, or one that renamed it away).
fn unknown_command(e: &redis::RedisError) -> bool {
    e.to_string()
        .to_ascii_lowercase()
        .contains("unknown command")
}

fn timed_out() -> redis::RedisError {
    redis::RedisError::from((
        redis::ErrorKind::IoError,
        "no answer within cluster.timeout_ms",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use mdproxy_config::Secret;

    fn connector(url: &str) -> Result<Connector, ClusterError> {
        Connector::new(&ClusterConfig {
            redis_url: Secret::new(url),
            ..ClusterConfig::default()
        })
    }

    /// What this build cannot connect to is refused with a reason that never holds
    /// the URL's password; `rediss://` is one it can.
    #[test]
    fn urls_this_build_cannot_use_are_refused_without_their_password() {
        assert!(connector("redis://:pw@127.0.0.1:6379/0").is_ok());
        assert!(connector("rediss://:pw@127.0.0.1:6380/0").is_ok());
        for url in ["http://:pw@127.0.0.1/", "redis://:pw@[::1"] {
            let refused = connector(url).err().unwrap();
            assert_eq!(refused.key, "redis_url");
            assert!(!refused.to_string().contains("pw"), "{refused}");
        }
    }

    /// A CA file that cannot be read stops the start, naming the key and the path.
    #[test]
    fn an_unreadable_ca_file_is_refused_by_name() {
        let refused = Connector::new(&ClusterConfig {
            redis_url: Secret::new("rediss://:pw@127.0.0.1:6380/0"),
            tls_ca_file: "/nonexistent/ca.pem".into(),
            ..ClusterConfig::default()
        })
        .err()
        .unwrap();
        assert_eq!(refused.key, "tls_ca_file");
        assert!(
            refused
                .to_string()
                .starts_with("cluster.tls_ca_file: cannot read /nonexistent/ca.pem"),
            "{refused}"
        );
    }

    /// The user and password of `[cluster]` are laid over the URL's.
    #[test]
    fn username_and_password_reach_the_connection() {
        let c = Connector::new(&ClusterConfig {
            redis_url: Secret::new("redis://127.0.0.1:6379/0"),
            username: "mdproxy".into(),
            password: Secret::new("acl-pw"),
            ..ClusterConfig::default()
        })
        .unwrap();
        let Target::Url(client) = &c.target else {
            panic!("a URL target")
        };
        let redis = &client.get_connection_info().redis;
        assert_eq!(redis.username.as_deref(), Some("mdproxy"));
        assert_eq!(redis.password.as_deref(), Some("acl-pw"));
        assert!(!c.follows_failover());
        assert_eq!(
            address(&client.get_connection_info().addr),
            "127.0.0.1:6379"
        );
    }

    /// The serving masters of `CLUSTER NODES`: replicas, failing masters and
    /// masters without slots are left out; sorted, shown comma-separated.
    #[test]
    fn the_serving_masters_are_read_from_cluster_nodes() {
        let nodes = "\
a1 127.0.0.1:7001@17001 master - 0 1 2 connected 5461-10922
a0 127.0.0.1:7000@17000,redis-0 myself,master - 0 0 1 connected 0-5460
a2 127.0.0.1:7002@17002 master,fail - 0 1 3 connected 10923-16383
a3 127.0.0.1:7003@17003 slave a2 0 1 4 connected
a4 [::1]:7004@17004 master - 0 1 5 connected 10923-16382 16383 [16383->-a9]
a5 127.0.0.1:7005@17005 master - 0 1 6 connected
";
        let (masters, served) = masters_in(nodes);
        assert_eq!(served, 5461 + 5462 + 5461);
        assert_eq!(
            masters,
            [
                ("127.0.0.1".to_owned(), 7000),
                ("127.0.0.1".to_owned(), 7001),
                ("::1".to_owned(), 7004)
            ]
        );
        assert_eq!(
            addresses(&masters),
            "127.0.0.1:7000,127.0.0.1:7001,[::1]:7004"
        );
    }

    /// Seed nodes make a Cluster target, which follows failovers (a node marked
    /// away starts a new session from the seeds).
    #[test]
    fn seed_nodes_make_a_cluster_that_follows_failovers() {
        let c = Connector::new(&ClusterConfig {
            nodes: vec![
                "redis://127.0.0.1:7000".into(),
                "redis://127.0.0.1:7001".into(),
            ],
            password: Secret::new("acl-pw"),
            ..ClusterConfig::default()
        })
        .unwrap();
        assert!(matches!(&c.target, Target::Cluster(seeds) if seeds.nodes.len() == 2));
        assert!(c.follows_failover());
    }
}
