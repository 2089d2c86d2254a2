//! The MCP server an agent talks to (rmcp's `ServerHandler`): the profile's tools
//! listed with the catalogue's schemas and a cache hint, each call answered by
//! [`super::call`] and counted by tool and outcome.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use rmcp::model::{
    CacheScope, CallToolRequestParams, CallToolResponse, Implementation, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};

use super::call::{self, Outcome};
use crate::state::AppState;
use mdproxy_api::tools::TOOLS;

/// How long a client may keep the tool list: it changes only with a new build.
const TOOLS_TTL_MS: u64 = 3_600_000;

/// Tool calls by tool (in [`TOOLS`]' order) and outcome, and requests to `/mcp`.
#[derive(Debug)]
pub struct Calls {
    by_tool: Vec<[AtomicU64; Outcome::ALL.len()]>,
}

impl Default for Calls {
    fn default() -> Calls {
        Calls {
            by_tool: TOOLS.iter().map(|_| Default::default()).collect(),
        }
    }
}

impl Calls {
    fn count(&self, tool: usize, outcome: Outcome) {
        self.by_tool[tool][outcome.index()].fetch_add(1, Ordering::Relaxed);
    }

    /// Every (tool, outcome, calls) with at least one call.
    pub fn counted(&self) -> Vec<(&'static str, Outcome, u64)> {
        let mut out = Vec::new();
        for (tool, counts) in TOOLS.iter().zip(&self.by_tool) {
            for outcome in Outcome::ALL {
                let n = counts[outcome.index()].load(Ordering::Relaxed);
                if n > 0 {
                    out.push((tool.name, outcome, n));
                }
            }
        }
        out
    }
}

/// One agent's server: the shared state, the tools it may call, the counters.
#[derive(Clone)]
pub struct Server {
    pub(super) state: AppState,
    pub(super) tools: Arc<[Tool]>,
    pub(super) calls: Arc<Calls>,
    pub(super) max_chars: usize,
}

/// The tools of the profile that `allowed` names (all when it is empty), as MCP
/// lists them.
pub fn listed(allowed: &[String]) -> Arc<[Tool]> {
    TOOLS
        .iter()
        .filter(|tool| allowed.is_empty() || allowed.iter().any(|a| a == tool.name))
        .map(|tool| {
            Tool::new(tool.name, tool.description, tool.input_schema()).annotate(
                ToolAnnotations::new()
                    .read_only(true)
                    .destructive(false)
                    .idempotent(true)
                    .open_world(true),
            )
        })
        .collect()
}

impl ServerHandler for Server {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("mdproxy", crate::build::VERSION))
            .with_instructions(
                "Chinese market data (A-shares, funds, macro, news) from a caching proxy. \
                 Each result carries `asOf` (when the upstream answered) and `cache` \
                 (hit, stale or miss). Codes are accepted as people type them \
                 (600519, 600519.SH, sh600519).",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.tools.to_vec())
            .with_ttl_ms(TOOLS_TTL_MS)
            .with_cache_scope(CacheScope::Public))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let offered = self.tools.iter().any(|t| t.name == request.name);
        let Some(index) = TOOLS
            .iter()
            .position(|t| t.name == request.name)
            .filter(|_| offered)
        else {
            return Err(ErrorData::invalid_params(
                format!("unknown tool {}", request.name),
                None,
            ));
        };
        let arguments = request.arguments.unwrap_or_default();
        let (result, outcome) =
            call::call(&self.state, &TOOLS[index], &arguments, self.max_chars).await;
        self.calls.count(index, outcome);
        Ok(result.into())
    }
}
