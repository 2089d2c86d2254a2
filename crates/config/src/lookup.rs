//! What the readers of a configuration ask of it: an endpoint's TTLs and upstream
//! timeout, and every client token with its name and limit.

use std::time::Duration;

use mdproxy_api::catalog::{Endpoint, FreshnessClass, Patience, catalog};

use super::{ClassTtl, ClientConfig, Config, TtlOverride, UpstreamConfig};

impl UpstreamConfig {
    /// The upstream timeout of `endpoint`: its entry in `endpoint_timeouts_ms`, else
    /// `long_timeout_ms` for the endpoints the catalogue marks slow, else `timeout_ms`.
    pub fn timeout_for(&self, endpoint: &Endpoint) -> Duration {
        let ms = self
            .endpoint_timeouts_ms
            .get(&endpoint.path)
            .copied()
            .unwrap_or(match endpoint.patience {
                Patience::Standard => self.timeout_ms,
                Patience::Long => self.long_timeout_ms,
            });
        Duration::from_millis(ms)
    }

    /// The longest timeout of any endpoint: a cluster's fill lease must outlast it.
    pub fn longest_timeout(&self) -> Duration {
        catalog()
            .with_passthrough()
            .map(|e| self.timeout_for(e))
            .max()
            .unwrap_or_default()
    }
}

impl TtlOverride {
    /// `base` with this override's keys laid over it.
    pub fn apply(&self, base: ClassTtl) -> ClassTtl {
        ClassTtl {
            session_fresh_secs: self.session_fresh_secs.unwrap_or(base.session_fresh_secs),
            session_stale_secs: self.session_stale_secs.unwrap_or(base.session_stale_secs),
            closed_fresh_secs: self.closed_fresh_secs.unwrap_or(base.closed_fresh_secs),
            closed_stale_secs: self.closed_stale_secs.unwrap_or(base.closed_stale_secs),
            until_open: self.until_open.unwrap_or(base.until_open),
            error_secs: self.error_secs.unwrap_or(base.error_secs),
        }
    }
}

impl Config {
    /// The TTLs of an endpoint for an answer of `class`: the class's, with the
    /// endpoint's override laid over them.
    pub fn ttl(&self, endpoint_path: &str, class: FreshnessClass) -> ClassTtl {
        let base = self.freshness.classes[&class];
        match self.freshness.endpoints.get(endpoint_path) {
            Some(over) => over.apply(base),
            None => base,
        }
    }

    /// Every client token with its name and limit, plain `auth.tokens` first.
    pub fn clients(&self) -> Vec<ClientConfig> {
        let plain = self
            .auth
            .tokens
            .iter()
            .enumerate()
            .map(|(i, token)| ClientConfig {
                name: format!("token{i}"),
                token: token.clone(),
                rps: None,
                burst: None,
            });
        plain.chain(self.auth.clients.iter().cloned()).collect()
    }
}
