//! The one place that makes (and remakes) the links to Redis: the data connection
//! every operation runs on, and the subscription the events arrive on, to one Redis
//! by URL or to the master the sentinels name at each (re)connect; TLS and the ACL
//! user apply to either. Redis Cluster would grow here, behind [`Connection`].

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig, PubSub};
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{
    ClientTlsConfig, ConnectionAddr, IntoConnectionInfo, RedisConnectionInfo, TlsCertificates,
    TlsMode,
};

use crate::config::{ClusterConfig, REDIS_URL_FORM, Secret};

/// The data connection: cheap to clone, every clone shares one link.
#[derive(Clone)]
pub(crate) enum Connection {
    /// One Redis, reconnected by the manager.
    Single(ConnectionManager),
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
            #[cfg(test)]
            Connection::Mock(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Connection::Single(c) => c.get_db(),
            #[cfg(test)]
            Connection::Mock(c) => redis::aio::ConnectionLike::get_db(c),
        }
    }
}

/// Where the master is: one address, or whatever the sentinels name now.
enum Target {
    /// `redis_url` (with `username`, `password` and the TLS files applied).
    Url(redis::Client),
    /// Asked on every (re)connect; one lookup at a time.
    Sentinel(tokio::sync::Mutex<SentinelClient>),
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
    /// The subscription the events arrive on.
    pub(crate) pubsub: PubSub,
    /// `host:port` of the Redis in use (never a credential).
    pub(crate) address: String,
}

impl Connector {
    /// The connector of `config`; reads the TLS files it names.
    ///
    /// # Errors
    /// When `redis_url` is no URL this build can connect to, or a TLS file cannot
    /// be read (the message never holds the URL or a password).
    pub(crate) fn new(config: &ClusterConfig) -> Result<Connector, String> {
        let certificates = certificates(config)?;
        let target = if config.sentinels.is_empty() {
            Target::Url(url_client(config, certificates)?)
        } else {
            Target::Sentinel(tokio::sync::Mutex::new(sentinel_client(
                config,
                certificates,
            )?))
        };
        let timeout = Duration::from_millis(config.timeout_ms);
        let steps = u32::try_from(config.sentinels.len()).unwrap_or(u32::MAX);
        Ok(Connector {
            target,
            timeout,
            lookup_timeout: timeout.saturating_mul(steps.saturating_add(2)),
        })
    }

    /// Whether the master may move (sentinels): a node marked away then asks the
    /// sentinels again rather than the address it had.
    pub(crate) fn follows_failover(&self) -> bool {
        matches!(self.target, Target::Sentinel(_))
    }

    /// The client of the master now: the URL's, or the one the sentinels name.
    async fn master(&self) -> redis::RedisResult<redis::Client> {
        match &self.target {
            Target::Url(client) => Ok(client.clone()),
            Target::Sentinel(sentinels) => {
                let lookup = async { sentinels.lock().await.async_get_client().await };
                tokio::time::timeout(self.lookup_timeout, lookup)
                    .await
                    .map_err(|_| timed_out())?
            }
        }
    }

    /// A new data connection and a subscription to `channels`, on the master of
    /// now.
    ///
    /// # Errors
    /// Redis's (or the sentinels'), when it cannot be reached, refuses the user or
    /// password, or does not answer within the timeout.
    pub(crate) async fn connect(&self, channels: &[&str]) -> redis::RedisResult<Session> {
        let client = self.master().await?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(self.timeout)
            .set_response_timeout(self.timeout)
            .set_number_of_retries(1);
        let conn = ConnectionManager::new_with_config(client.clone(), config).await?;
        let mut pubsub = tokio::time::timeout(self.timeout, client.get_async_pubsub())
            .await
            .map_err(|_| timed_out())??;
        for channel in channels {
            pubsub.subscribe(*channel).await?;
        }
        Ok(Session {
            conn: Connection::Single(conn),
            pubsub,
            address: address(&client.get_connection_info().addr),
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
fn certificates(config: &ClusterConfig) -> Result<Option<TlsCertificates>, String> {
    let read = |key: &str, path: &str| -> Result<Option<Vec<u8>>, String> {
        if path.is_empty() {
            return Ok(None);
        }
        std::fs::read(path)
            .map(Some)
            .map_err(|e| format!("cluster.{key}: cannot read {path}: {e}"))
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
            return Err("cluster.tls_cert_file and cluster.tls_key_file go together".to_owned());
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
) -> Result<redis::Client, String> {
    let refused = || format!("cluster.redis_url: {REDIS_URL_FORM}");
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
    client.map_err(|_| "cluster.redis_url: the TLS files do not fit it (rediss:// is needed for them, and PEM files)".to_owned())
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

/// The sentinels' client: plain TCP to the sentinels; the master with the ACL
/// user, the password and TLS of `[cluster]`.
fn sentinel_client(
    config: &ClusterConfig,
    certificates: Option<TlsCertificates>,
) -> Result<SentinelClient, String> {
    let addrs = config
        .sentinel_addrs()
        .into_iter()
        .map(|(host, port)| ConnectionAddr::Tcp(host, port));
    let mut builder = SentinelClientBuilder::new(
        addrs,
        config.sentinel_master.clone(),
        SentinelServerType::Master,
    )
    .map_err(|_| "cluster.sentinels: no sentinel to ask".to_owned())?;
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
    if config.tls {
        builder = builder.set_client_to_redis_tls_mode(TlsMode::Secure);
        if let Some(certificates) = certificates {
            builder = builder.set_client_to_redis_certificates(certificates);
        }
    }
    builder
        .build()
        .map_err(|_| "cluster.sentinels: not a list of host:port".to_owned())
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
    use crate::config::Secret;

    fn connector(url: &str) -> Result<Connector, String> {
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
            assert!(refused.starts_with("cluster.redis_url"), "{refused}");
            assert!(!refused.contains("pw"), "{refused}");
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
        assert!(
            refused.starts_with("cluster.tls_ca_file: cannot read /nonexistent/ca.pem"),
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
}
