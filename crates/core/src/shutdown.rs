//! Process signals: SIGINT or SIGTERM end the process gracefully. (SIGHUP is reload,
//! never shutdown.) We own the signals; no library installs its own handler. The
//! handlers are installed before anything is started, so a supervisor that stops
//! the process right after it starts still gets a clean stop.

/// The shutdown signals, caught from the moment they are installed.
pub struct Signals {
    #[cfg(unix)]
    term: tokio::signal::unix::Signal,
    #[cfg(unix)]
    int: tokio::signal::unix::Signal,
}

impl Signals {
    /// Installs the SIGINT and SIGTERM handlers now: from here on neither signal
    /// ends the process by its default action. Call it inside the runtime, before
    /// starting anything.
    ///
    /// # Errors
    /// When a handler cannot be installed (no signal driver in the runtime).
    pub fn install() -> std::io::Result<Signals> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            Ok(Signals {
                term: signal(SignalKind::terminate())?,
                int: signal(SignalKind::interrupt())?,
            })
        }
        #[cfg(not(unix))]
        {
            Ok(Signals {})
        }
    }

    /// Resolves on the first SIGINT or SIGTERM received since [`install`](Self::install),
    /// logging which.
    pub async fn recv(mut self) {
        #[cfg(unix)]
        tokio::select! {
            _ = self.int.recv() => tracing::info!(signal = "SIGINT", "shutting down"),
            _ = self.term.recv() => tracing::info!(signal = "SIGTERM", "shutting down"),
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
            tracing::info!(signal = "ctrl-c", "shutting down");
        }
    }
}
