//! The one place that makes (and remakes) the links to Redis: the data connection
//! every operation runs on, and the subscription the events arrive on. Today one
//! Redis by URL; Sentinel, Redis Cluster and TLS grow here, behind [`Connection`].

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig, PubSub};

use crate::config::ClusterConfig;

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

/// Makes the links to the Redis of `[cluster]`.
pub(crate) struct Connector {
    client: redis::Client,
    /// Connecting and every answer are bounded by it (`cluster.timeout_ms`).
    timeout: Duration,
}

impl Connector {
    /// The connector of `config`.
    ///
    /// # Errors
    /// When `redis_url` is no URL this build can connect to (the message never
    /// holds the URL: it may carry a password).
    pub(crate) fn new(config: &ClusterConfig) -> Result<Connector, String> {
        let url = config.redis_url.expose();
        if url.starts_with("rediss://") {
            return Err(
                "cluster.redis_url: rediss:// (TLS to Redis) is not supported yet; use redis://"
                    .to_owned(),
            );
        }
        let client = redis::Client::open(url).map_err(|_| {
            "cluster.redis_url is not a redis://[:password@]host:port/db URL".to_owned()
        })?;
        Ok(Connector {
            client,
            timeout: Duration::from_millis(config.timeout_ms),
        })
    }

    /// A new data connection and a subscription to `channels`.
    ///
    /// # Errors
    /// Redis's, when it cannot be reached, refuses the password, or does not
    /// answer within the timeout.
    pub(crate) async fn connect(
        &self,
        channels: &[&str],
    ) -> redis::RedisResult<(Connection, PubSub)> {
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(self.timeout)
            .set_response_timeout(self.timeout)
            .set_number_of_retries(1);
        let conn = ConnectionManager::new_with_config(self.client.clone(), config).await?;
        let mut pubsub = tokio::time::timeout(self.timeout, self.client.get_async_pubsub())
            .await
            .map_err(|_| timed_out())??;
        for channel in channels {
            pubsub.subscribe(*channel).await?;
        }
        Ok((Connection::Single(conn), pubsub))
    }
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
    /// the URL's password.
    #[test]
    fn urls_this_build_cannot_use_are_refused_without_their_password() {
        assert!(connector("redis://:pw@127.0.0.1:6379/0").is_ok());
        for url in [
            "rediss://:pw@127.0.0.1:6380/0",
            "http://:pw@127.0.0.1/",
            "redis://:pw@[::1",
        ] {
            let refused = connector(url).err().unwrap();
            assert!(refused.starts_with("cluster.redis_url"), "{refused}");
            assert!(!refused.contains("pw"), "{refused}");
        }
        assert!(
            connector("rediss://x")
                .err()
                .unwrap()
                .contains("not supported yet")
        );
    }
}
