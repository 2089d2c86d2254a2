//! `[mcp]`: the Model Context Protocol endpoint for AI agents at `/mcp`
//! (docs/mcp.md): on or off, the browser origins it takes, the tools it offers, the
//! longest result, how long an idle session lives.

use serde::{Deserialize, Serialize};

use super::problem::Problem;

/// `[mcp]`: its tools answered from the same cache as the REST API.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct McpConfig {
    /// Serve `/mcp`. Off: `/mcp` is a 404 like any unknown path.
    pub enabled: bool,
    /// Browser origins allowed to call it (`https://app.example.com:443`); a request
    /// with another `Origin` is refused. Empty: every request with an `Origin`
    /// header is refused (agents send none; a web page must be named).
    pub allowed_origins: Vec<String>,
    /// The tools it offers, by name; empty: all 28.
    pub tools: Vec<String>,
    /// Longest tool result in characters: past it the longest list in the data is
    /// cut, and the result says so (Claude Code reads about 25,000 tokens).
    pub max_result_chars: usize,
    /// Seconds a session (2025 revisions) lives with no request and no open stream
    /// of its agent; its quote watches end after as long without either.
    pub session_idle_secs: u64,
}

/// rmcp's own idle time for a session: five minutes.
const SESSION_IDLE_SECS: u64 = 300;
/// The longest idle time: the fleet keeps a session's `initialize` a day.
const MAX_SESSION_IDLE_SECS: u64 = 86_400;

impl Default for McpConfig {
    fn default() -> Self {
        McpConfig {
            enabled: false,
            allowed_origins: Vec::new(),
            tools: Vec::new(),
            max_result_chars: 60_000,
            session_idle_secs: SESSION_IDLE_SECS,
        }
    }
}

impl McpConfig {
    /// Origins without their scheme or port, tools that do not exist, an idle
    /// time of no seconds or past a day.
    pub(super) fn problems(&self, problems: &mut Vec<Problem>) {
        if !(1..=MAX_SESSION_IDLE_SECS).contains(&self.session_idle_secs) {
            problems.push(Problem::new(
                "mcp.session_idle_secs",
                format!("must be 1 to {MAX_SESSION_IDLE_SECS} (a day: how long the fleet keeps a session)"),
            ));
        }
        for origin in &self.allowed_origins {
            // rmcp matches scheme, host and port: an entry needs its scheme, and a
            // port (`:*` for any) to mean what it says.
            let rest = origin
                .strip_prefix("http://")
                .or_else(|| origin.strip_prefix("https://"));
            if origin != "null" && !rest.is_some_and(|r| r.contains(':') && !r.contains('/')) {
                problems.push(Problem::new(
                    "mcp.allowed_origins",
                    format!(
                        "{origin:?} must be an origin with its scheme and port, such as \"https://app.example.com:443\" (\":*\" for any port), or \"null\""
                    ),
                ));
            }
        }
        for tool in &self.tools {
            if mdproxy_api::tools::find(tool).is_none() {
                let names: Vec<&str> = mdproxy_api::tools::TOOLS.iter().map(|t| t.name).collect();
                problems.push(Problem::new(
                    "mcp.tools",
                    format!("{tool:?} is no tool; the tools are {}", names.join(", ")),
                ));
            }
        }
    }
}
