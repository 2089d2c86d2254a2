//! Operations around the data path: the admin listener (metrics, health, status,
//! purge), the status page and its traffic history, the Prometheus exposition,
//! configuration reload, the upstream probe, the prewarm scheduler and the
//! operator-facing reports.

pub(crate) mod admin;
pub(crate) mod history;
pub(crate) mod metrics;
pub mod probe;
pub mod reload;
pub mod report;
pub mod scheduler;
pub(crate) mod status;
