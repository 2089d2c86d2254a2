//! The demo set-up: a simulated upstream on an ephemeral loopback port and the proxy
//! in front of it, with the default configuration. `mdproxy demo`, the tests and the
//! benches all start it the same way.

use std::sync::Arc;

use crate::app::{App, StartError};
use crate::cache::market::Clock;
use crate::config::{Config, Secret};
use crate::sim::{SimConfig, SimHandle};

/// A running simulator and the proxy in front of it.
pub struct Demo {
    pub sim: SimHandle,
    pub proxy: App,
}

impl Demo {
    /// Stops the proxy, then the simulator.
    pub async fn shutdown(self) {
        self.proxy.shutdown().await;
        self.sim.shutdown().await;
    }
}

/// The config of a proxy in front of `sim`, listening on `listen` for `token`.
pub fn config_for(sim: &SimHandle, listen: &str, token: Secret) -> Config {
    let mut config = Config::default();
    config.server.listen = listen.to_owned();
    config.auth.tokens = vec![token];
    config.upstream.base_url = sim.base_url();
    config.upstream.token = sim.token().clone();
    config
}

/// Starts a simulator (with `latency_ms` per answer) and a proxy on `listen`, with
/// its admin listener on `admin_listen` (empty: none).
///
/// # Errors
/// When an address cannot be bound.
pub async fn start(
    listen: &str,
    admin_listen: &str,
    token: Secret,
    latency_ms: u64,
    clock: Arc<dyn Clock>,
) -> Result<Demo, StartError> {
    let sim_config = SimConfig {
        listen: "127.0.0.1:0".into(),
        // A fresh upstream secret per run: it never needs to be typed.
        token: Secret::new(format!("sim-{:016x}", fastrand::u64(..))),
        latency_ms,
        ..SimConfig::default()
    };
    let sim = crate::sim::start(&sim_config, Arc::clone(&clock))
        .await
        .map_err(|source| StartError::Bind {
            key: "simulator",
            addr: sim_config.listen.clone(),
            source,
        })?;
    let mut config = config_for(&sim, listen, token);
    config.admin.listen = admin_listen.to_owned();
    let proxy = crate::app::start(&config, clock).await?;
    Ok(Demo { sim, proxy })
}
