//! The demo set-up: a simulated upstream on an ephemeral loopback port and the proxy
//! in front of it, with the default configuration. `mdproxy demo`, the tests and the
//! benches all start it the same way.

use std::sync::Arc;

use mdproxy_config::{Config, Secret};
use mdproxy_core::app::{App, StartError};
use mdproxy_market::Clock;
use mdproxy_sim::{SimConfig, SimHandle};

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
    config.upstream.token = Secret::new(sim.token());
    config
}

/// What `mdproxy demo` is asked for.
#[derive(Clone, Debug)]
pub struct DemoOptions {
    /// Client listener address.
    pub listen: String,
    /// Admin listener address (empty: none).
    pub admin_listen: String,
    /// The client token the proxy accepts.
    pub token: Secret,
    /// The admin token `POST /purge` takes.
    pub admin_token: Secret,
    /// Browser origins allowed by CORS (`server.cors_origins`).
    pub cors_origins: Vec<String>,
    /// Latency the simulator adds to each answer.
    pub latency_ms: u64,
}

/// Starts a simulator and a proxy in front of it as `options` say.
///
/// # Errors
/// When an address cannot be bound.
pub async fn start(options: &DemoOptions, clock: Arc<dyn Clock>) -> Result<Demo, StartError> {
    let sim_config = SimConfig {
        listen: "127.0.0.1:0".into(),
        // A fresh upstream secret per run: it never needs to be typed.
        token: format!("sim-{:016x}", fastrand::u64(..)),
        latency_ms: options.latency_ms,
        ..SimConfig::default()
    };
    let sim = mdproxy_sim::start(&sim_config, Arc::clone(&clock))
        .await
        .map_err(|source| StartError::Bind {
            key: "simulator",
            addr: sim_config.listen.clone(),
            source,
        })?;
    let mut config = config_for(&sim, &options.listen, options.token.clone());
    config.admin.listen.clone_from(&options.admin_listen);
    config.admin.token = options.admin_token.clone();
    config.server.cors_origins.clone_from(&options.cors_origins);
    // AI agents too: the demo shows every door (docs/mcp.md).
    config.mcp.enabled = true;
    config.validate()?;
    let proxy = mdproxy_core::app::start(&config, clock).await?;
    Ok(Demo { sim, proxy })
}
