//! Operations around the data path: the admin listener (metrics, health, status,
//! purge), what the status page says and its traffic history, the Prometheus
//! exposition, configuration reload and its log, the upstream probe, the prewarm
//! scheduler and the operator-facing reports.

pub(crate) mod admin;
pub(crate) mod history;
pub(crate) mod metrics;
pub(crate) mod overview;
pub mod probe;
pub mod reload;
pub mod reload_log;
pub mod report;
pub mod scheduler;
pub(crate) mod status;
