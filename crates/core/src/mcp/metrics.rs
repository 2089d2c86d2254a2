//! The MCP endpoint's metrics: tool calls by tool and outcome, and the open
//! sessions, read at scrape time.

use std::fmt;
use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;

use super::server::Calls;
use crate::stats::expose;

pub(super) struct McpMetrics {
    pub(super) calls: Arc<Calls>,
    pub(super) sessions: Arc<LocalSessionManager>,
}

impl fmt::Debug for McpMetrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("McpMetrics")
    }
}

impl Collector for McpMetrics {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> fmt::Result {
        // A scrape does not wait for the sessions' lock: while it is held (a
        // session opening or closing), the gauge is left out of that scrape.
        if let Ok(sessions) = self.sessions.sessions.try_read() {
            let help = "Open MCP sessions (2025 revisions; the 2026-07-28 one has none)";
            expose::gauge(&mut encoder, "mcp_sessions", help, sessions.len() as u64)?;
        }
        let help = "Stateless MCP tool calls answered without rmcp's service (counted in mcp_tool_calls too)";
        expose::counter(&mut encoder, "mcp_direct_calls", help, self.calls.direct())?;
        let mut family = encoder.encode_descriptor(
            "mcp_tool_calls",
            "MCP tool calls by tool (resources/read: resource reads) and outcome (hit, stale, miss, bad_argument, not_found, failed)",
            None,
            MetricType::Counter,
        )?;
        for (tool, outcome, n) in self.calls.counted() {
            let labels = [("tool", tool), ("outcome", outcome.as_str())];
            ConstCounter::new(n).encode(family.encode_family(&labels)?)?;
        }
        Ok(())
    }
}
