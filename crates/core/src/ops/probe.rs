//! The upstream probe: one cheap request at start and after a reload that changed
//! `[upstream]`, so an unreachable upstream, a wrong base URL or a refused token is
//! said loudly in the log at once, not discovered by the first client. The answer
//! is cached like any other (the probe doubles as a first prewarm). The probe's
//! target is checked here too ([`check`]), where it is used.

use std::time::Instant;

use crate::state::AppState;
use crate::upstream::budget::Priority;
use crate::upstream::client::FetchError;
use mdproxy_config::{Config, Problem, redacted_url};

/// What the probe found.
#[derive(Debug)]
pub enum Probe {
    /// The upstream answered and took our token.
    Ok { millis: u64 },
    /// The upstream refused our token (401/403).
    TokenRefused { status: u16 },
    /// No answer: unreachable, or not within the timeout.
    Unreachable { detail: String },
    /// An answer, but a failure (5xx, a redirect, an invalid body...).
    Failed { detail: String },
}

/// Probes the upstream once with `upstream.probe_target` and logs the result:
/// `info` when it answered, `error` when it is unreachable or refuses our token,
/// `warn` otherwise. `None` when no probe is configured.
pub async fn probe(state: &AppState) -> Option<Probe> {
    let snap = state.snapshot();
    // Validation refuses credentials in the URL; a config built in code is shown
    // without them all the same.
    let base_url = redacted_url(&snap.config.upstream.base_url);
    let target = snap.config.upstream.probe_target.clone();
    // Checked when the config was loaded; an invalid one is simply not probed.
    let valid = mdproxy_api::parse_target(&target).ok()?;
    let started = Instant::now();
    let (result, _) = state
        .cache()
        .fill(&snap.policy, &valid, Priority::Client, true)
        .await;
    let probe = match result {
        Ok(_) => Probe::Ok {
            millis: started.elapsed().as_millis() as u64,
        },
        Err(FetchError::TokenRefused(status)) => Probe::TokenRefused { status },
        Err(e @ (FetchError::Timeout | FetchError::Unreachable)) => Probe::Unreachable {
            detail: e.to_string(),
        },
        // A 404 or another 4xx answer: the upstream is there and took our token.
        Err(FetchError::Answer { .. }) => Probe::Ok {
            millis: started.elapsed().as_millis() as u64,
        },
        Err(e) => Probe::Failed {
            detail: e.to_string(),
        },
    };
    match &probe {
        Probe::Ok { millis } => {
            tracing::info!(%base_url, probe_target = %target, upstream_ms = millis, "upstream probe: reachable, our token accepted");
        }
        Probe::TokenRefused { status } => tracing::error!(
            %base_url,
            status,
            "upstream probe: the upstream refused our token; set upstream.token (MDPROXY_UPSTREAM_TOKEN). Cached answers are served; misses fail with 502"
        ),
        Probe::Unreachable { detail } => tracing::error!(
            %base_url,
            detail = %detail,
            "upstream probe: the upstream is unreachable; check upstream.base_url and the network. /readyz stays 503 until it answers"
        ),
        Probe::Failed { detail } => {
            tracing::warn!(%base_url, detail = %detail, "upstream probe: the upstream answered with a failure");
        }
    }
    Some(probe)
}

/// What is wrong with `upstream.probe_target`: a request the proxy would refuse,
/// or the stream (a [`mdproxy_config::Check`], run by the config loader).
pub fn check(config: &Config, _env: &dyn mdproxy_config::Env) -> Vec<Problem> {
    let target = &config.upstream.probe_target;
    if target.is_empty() {
        return Vec::new();
    }
    let message = match mdproxy_api::parse_target(target) {
        Ok(valid) if !valid.endpoint.streaming => return Vec::new(),
        Ok(_) => "the stream cannot be a probe".to_owned(),
        Err(e) => format!("{target:?} is not a valid request ({e})"),
    };
    vec![Problem::new("upstream.probe_target", message)]
}

/// Runs [`probe`] in the background, as a task of the application.
pub fn spawn(state: &AppState) {
    let (task_state, stop) = (state.clone(), state.stop().clone());
    state.tracker().spawn(async move {
        tokio::select! {
            _ = probe(&task_state) => {}
            () = stop.cancelled() => {}
        }
    });
}
