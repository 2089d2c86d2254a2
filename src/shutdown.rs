//! Process signals: SIGINT or SIGTERM end the process gracefully. (SIGHUP is reload,
//! never shutdown.) We own the signals; no library installs its own handler.

/// Resolves on the first SIGINT or SIGTERM, logging which.
pub async fn signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler installs once");
        tokio::select! {
            _ = tokio::signal::ctrl_c() => tracing::info!(signal = "SIGINT", "shutting down"),
            _ = term.recv() => tracing::info!(signal = "SIGTERM", "shutting down"),
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
        tracing::info!(signal = "ctrl-c", "shutting down");
    }
}
