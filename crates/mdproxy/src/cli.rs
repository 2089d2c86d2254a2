//! The `mdproxy` command line: its subcommands, and running each (the binary's
//! `main` only picks the allocator and calls [`main`]).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use clap::{Parser, Subcommand};

use mdproxy_config::{Config, LogFormat, Secret};
use mdproxy_core::telemetry::Telemetry;
use mdproxy_market::SystemClock;
use mdproxy_sim::SimConfig;

/// A caching read-through proxy for a Chinese market data API.
#[derive(Parser)]
#[command(name = "mdproxy", version, about)]
pub struct Cli {
    /// Log filter (tracing EnvFilter syntax), e.g. `info`, `mdproxy=debug` or
    /// `info,access=off` (no access log).
    #[arg(long, global = true, env = "MDPROXY_LOG", default_value = "info")]
    log: String,
    /// Log line format: `text` or `json` (default: `log.format` of the config, else text).
    #[arg(long, global = true, value_enum)]
    log_format: Option<LogFormat>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// The proxy in front of an in-process simulated upstream.
    Demo {
        /// Client listener address.
        #[arg(long, default_value = "127.0.0.1:8080")]
        listen: String,
        /// Client token to accept.
        #[arg(long, default_value = "demo-token")]
        token: String,
        /// Latency the simulated upstream adds to each answer.
        #[arg(long, default_value_t = 20)]
        upstream_latency_ms: u64,
        /// Admin listener (/metrics, /status, ...); empty to turn it off.
        #[arg(long, default_value = "127.0.0.1:9091")]
        admin_listen: String,
        /// Admin token for `POST /purge` (default: a random one, printed at start).
        #[arg(long)]
        admin_token: Option<String>,
        /// A browser origin allowed to call the proxy (CORS), such as
        /// `http://localhost:5173`; repeat for several.
        #[arg(long = "cors-origin")]
        cors_origins: Vec<String>,
    },
    /// The proxy in front of the real upstream configured in FILE.
    Serve {
        /// TOML configuration file (every key overridable by MDPROXY_* variables).
        #[arg(long)]
        config: PathBuf,
    },
    /// The simulated upstream alone.
    Sim {
        /// Listener address.
        #[arg(long, default_value = "127.0.0.1:9090")]
        listen: String,
        /// API key the simulator requires, as a bearer token, an `x-api-key` header or
        /// query parameter (empty: none).
        #[arg(long, default_value = "sim-upstream-token")]
        token: String,
        /// Latency added to each answer.
        #[arg(long, default_value_t = 0)]
        latency_ms: u64,
        /// Random extra latency, up to this many ms.
        #[arg(long, default_value_t = 0)]
        jitter_ms: u64,
        /// Fraction of requests answered 500, 0.0 to 1.0.
        #[arg(long, default_value_t = 0.0)]
        error_rate: f64,
        /// Push interval of the stream endpoint.
        #[arg(long, default_value_t = 3000)]
        stream_interval_ms: u64,
        /// Answer the heat map, the ETF list and the fund screen with raw control
        /// characters inside strings (invalid JSON), as the real upstream may.
        #[arg(long)]
        dirty_bodies: bool,
    },
    /// Prints the manual's generated tables: the endpoints (docs/endpoints.md), the
    /// configuration keys (docs/configuration.md) and the default TTLs
    /// (docs/freshness.md).
    Docs,
    /// Prints the OpenAPI 3.1 document of the API (also served at /api/v1/openapi.json).
    Openapi,
    /// Validates FILE and prints the effective TTL table per endpoint.
    CheckConfig {
        /// TOML configuration file.
        file: PathBuf,
    },
}

impl Command {
    /// The subcommand's name, for the start-up log line.
    fn name(&self) -> &'static str {
        match self {
            Command::Demo { .. } => "demo",
            Command::Serve { .. } => "serve",
            Command::Sim { .. } => "sim",
            Command::Docs => "docs",
            Command::Openapi => "openapi",
            Command::CheckConfig { .. } => "check-config",
        }
    }
}

/// Runs the command line: parses it, loads `serve`'s file, starts the log, then
/// runs the command in a tokio runtime with the shutdown signals caught first.
pub fn main() -> ExitCode {
    mdproxy_core::build::set_commit(crate::GIT_COMMIT);
    let cli = Cli::parse();
    // `serve` reads its file first: the log format may be in it, and a file that
    // does not load is reported on stderr before anything else happens.
    let served = match &cli.command {
        Command::Serve { config } => match load_to_start(config) {
            Ok(loaded) => Some(loaded),
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::FAILURE;
            }
        },
        _ => None,
    };
    let format = cli
        .log_format
        .or(served.as_ref().map(|c| c.log.format))
        .unwrap_or(LogFormat::Text);
    // Traces, for the servers: `[telemetry]` of serve's file (checked with it), the
    // `OTEL_*` variables for both. Exports what is left when this returns.
    let telemetry = match &cli.command {
        Command::Serve { .. } | Command::Demo { .. } => {
            let config = served
                .as_ref()
                .map(|c| c.telemetry.clone())
                .unwrap_or_default();
            match start_telemetry(&config) {
                Ok(telemetry) => telemetry,
                Err(e) => {
                    eprintln!("error: {e}");
                    return ExitCode::FAILURE;
                }
            }
        }
        _ => None,
    };
    // Flushes the log's background writer when this returns.
    let _log_writer = mdproxy_core::logging::init(&cli.log, format, telemetry.as_ref());
    if let Some(telemetry) = &telemetry {
        tracing::info!("telemetry: {}", telemetry.describe());
    }
    match cli.command {
        Command::Docs => {
            print_or_exit(&format!(
                "{}\n{}\n{}\n{}",
                mdproxy_api::catalog::catalog().markdown_table(),
                mdproxy_api::tools::markdown_table(),
                mdproxy_core::ops::report::config_reference(),
                mdproxy_core::ops::report::ttl_table(&Config::default())
            ));
            return ExitCode::SUCCESS;
        }
        Command::Openapi => {
            let document = mdproxy_api::openapi::document();
            let text =
                serde_json::to_string_pretty(&document).expect("a JSON value always serialises");
            print_or_exit(&format!("{text}\n"));
            return ExitCode::SUCCESS;
        }
        Command::CheckConfig { file } => {
            return match load_to_start(&file) {
                Ok(config) => {
                    for warning in warnings(&config) {
                        eprintln!("warning: {warning}");
                    }
                    print_or_exit(&format!(
                        "{}{}: OK\n",
                        mdproxy_core::ops::report::ttl_table(&config),
                        file.display()
                    ));
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    // One problem a line (`FILE:LINE: key: what`), then their number.
                    eprintln!("{e}");
                    ExitCode::FAILURE
                }
            };
        }
        _ => {}
    }
    // As nginx's `worker_rlimit_nofile`: the soft limit of open files up to the hard
    // one, which `check-config` counts on (connections, the disk tier's files).
    if let Err(e) = rlimit::increase_nofile_limit(u64::MAX) {
        tracing::warn!(error = %e, "cannot raise the limit of open files");
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("the tokio runtime starts");
    match runtime.block_on(run(cli.command, served, format, telemetry)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Why traces did not start.
#[derive(Debug, thiserror::Error)]
enum TelemetryStart {
    /// `[telemetry]` or the `OTEL_*` variables are wrong: every problem, one a line.
    #[error("{}", .0.join("\n"))]
    Settings(Vec<String>),
    /// The exporter could not start.
    #[error(transparent)]
    Exporter(#[from] mdproxy_core::telemetry::TelemetryError),
}

/// Starts traces when `config` and the `OTEL_*` variables set an endpoint.
///
/// # Errors
/// Every problem with them, or why the exporter could not start.
fn start_telemetry(
    config: &mdproxy_config::TelemetryConfig,
) -> Result<Option<Telemetry>, TelemetryStart> {
    let settings = mdproxy_core::telemetry::Settings::resolve(config, &process_env())
        .map_err(TelemetryStart::Settings)?;
    Ok(settings.map(|s| Telemetry::start(&s)).transpose()?)
}

/// Loads `path` as `serve` starts from it and `check-config` judges it: a reload's
/// checks, and the TLS files read (a reload leaves those to the listener's own
/// refresh), every problem reported at once.
fn load_to_start(path: &std::path::Path) -> Result<Config, mdproxy_config::Problems> {
    let checks = [
        mdproxy_core::ops::reload::CHECKS,
        &[mdproxy_core::edge::tls::check],
    ]
    .concat();
    mdproxy_config::load(path, &process_env(), &checks)
}

/// What `check-config` warns about in a configuration it accepts (`serve` logs the
/// same at start): a TLS private key that others may read.
fn warnings(config: &Config) -> Vec<String> {
    let key = &config.server.tls_key;
    (!key.is_empty())
        .then(|| mdproxy_core::edge::tls::key_warning(std::path::Path::new(key)))
        .flatten()
        .into_iter()
        .collect()
}

/// Writes `text` to stdout; a reader that went away (`mdproxy openapi | head`)
/// ends the process quietly rather than with a panic.
fn print_or_exit(text: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    if out
        .write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .is_err()
    {
        std::process::exit(0);
    }
}

/// Says that a server is up: lines on stdout for a person (and scripts that wait
/// for them), or, with JSON logs, one log event each, as every other line.
fn announce(format: LogFormat, lines: &[String]) {
    for line in lines {
        match format {
            LogFormat::Text => print_or_exit(&format!("{line}\n")),
            LogFormat::Json => tracing::info!(banner = %line, "started"),
        }
    }
}

async fn run(
    command: Command,
    served: Option<Config>,
    format: LogFormat,
    telemetry: Option<Telemetry>,
) -> Result<(), Box<dyn std::error::Error>> {
    // Before anything starts: a SIGTERM from now on is a clean stop.
    let signals = mdproxy_core::shutdown::Signals::install()?;
    tracing::info!(
        version = crate::VERSION,
        commit = crate::GIT_COMMIT,
        command = command.name(),
        "starting"
    );
    let clock = Arc::new(SystemClock);
    match command {
        Command::Demo {
            listen,
            token,
            upstream_latency_ms,
            admin_listen,
            admin_token,
            cors_origins,
        } => {
            let admin_token =
                admin_token.unwrap_or_else(|| format!("admin-{:012x}", fastrand::u64(..) >> 16));
            let options = crate::demo::DemoOptions {
                listen,
                admin_listen,
                token: Secret::new(token.clone()),
                admin_token: Secret::new(admin_token.clone()),
                cors_origins: cors_origins.clone(),
                latency_ms: upstream_latency_ms,
            };
            let demo = crate::demo::start(&options, clock).await?;
            let base = demo.proxy.base_url();
            let mut lines = vec![format!(
                "mdproxy demo: proxy {base} in front of a simulated upstream at {}",
                demo.sim.base_url()
            )];
            if let Some(admin) = demo.proxy.admin_addr {
                lines.push(format!(
                    "admin: http://{admin}/status and http://{admin}/metrics"
                ));
                // --globoff: curl would read `{code}` as a glob.
                lines.push(format!(
                    "purge: curl -s --globoff -X POST -H 'Authorization: Bearer {admin_token}' 'http://{admin}/purge?endpoint=/stock/detail/{{code}}'"
                ));
            }
            lines.push(format!(
                "MCP for AI agents: {} with the header X-API-Key: {token}",
                base.replace("/api/v1", "/mcp")
            ));
            for origin in &cors_origins {
                lines.push(format!("CORS: browsers at {origin} may call the proxy"));
            }
            let [detail, kline] = demo_commands(&token, &base);
            lines.push(format!("try:\n  {detail}"));
            lines.push(format!("  {kline}"));
            announce(format, &lines);
            signals.recv().await;
            let deadline = grace_deadline(&demo.proxy);
            demo.shutdown().await;
            export_the_rest(telemetry, deadline).await;
            Ok(())
        }
        Command::Serve { config: path } => {
            let env = process_env();
            let config = served.expect("serve's config is loaded before logging starts");
            let proxy = mdproxy_core::app::start(&config, clock).await?;
            proxy.watch_config(path, Arc::new(env));
            announce(
                format,
                &[format!(
                    "mdproxy serving {} in front of {}",
                    proxy.base_url(),
                    mdproxy_config::redacted_url(&config.upstream.base_url)
                )],
            );
            signals.recv().await;
            let deadline = grace_deadline(&proxy);
            proxy.shutdown().await;
            export_the_rest(telemetry, deadline).await;
            Ok(())
        }
        Command::Sim {
            listen,
            token,
            latency_ms,
            jitter_ms,
            error_rate,
            stream_interval_ms,
            dirty_bodies,
        } => {
            let config = SimConfig {
                listen,
                token,
                latency_ms,
                jitter_ms,
                error_rate,
                stream_interval_ms,
                dirty_bodies,
            };
            let sim = mdproxy_sim::start(&config, clock).await?;
            announce(
                format,
                &[format!(
                    "simulated upstream at {} (counters at http://{}/_sim/stats)",
                    sim.base_url(),
                    sim.addr
                )],
            );
            signals.recv().await;
            sim.shutdown().await;
            Ok(())
        }
        Command::CheckConfig { .. } | Command::Docs | Command::Openapi => Ok(()),
    }
}

/// When a stop asked for now must be over: `server.shutdown_grace_ms` (as it was
/// at start) from now.
fn grace_deadline(app: &mdproxy_core::app::App) -> Instant {
    Instant::now() + app.grace()
}

/// Exports the spans left once the server stopped, within what is left of its
/// shutdown grace (until `deadline`), so that a collector that never answers
/// cannot hold the process past it.
async fn export_the_rest(telemetry: Option<Telemetry>, deadline: Instant) {
    if let Some(telemetry) = telemetry {
        let left = deadline.saturating_duration_since(Instant::now());
        let _ = tokio::task::spawn_blocking(move || telemetry.shutdown(left)).await;
    }
}

/// The two commands `mdproxy demo` prints to try, for a proxy at `base` (its
/// `/api/v1` URL) taking `token`: README shows them as the default demo prints them.
pub fn demo_commands(token: &str, base: &str) -> [String; 2] {
    [
        format!(
            "curl -s -H 'Authorization: Bearer {token}' {base}/stock/detail/600519 -D - -o /dev/null"
        ),
        format!(
            "curl -s -H 'Authorization: Bearer {token}' '{base}/stock/kline?code=000001&period=week&fqt=pre' | head -c 300; echo"
        ),
    ]
}

/// The environment configuration reads, less the `MDPROXY_*` variables the command
/// line itself reads (clap's `env = ...`, such as `MDPROXY_LOG`): those are not
/// configuration keys, and not misspellings either.
pub fn process_env() -> mdproxy_config::ProcessEnv {
    fn walk(command: &clap::Command, out: &mut Vec<String>) {
        out.extend(
            command
                .get_arguments()
                .filter_map(|arg| arg.get_env())
                .map(|name| name.to_string_lossy().into_owned()),
        );
        for sub in command.get_subcommands() {
            walk(sub, out);
        }
    }
    let mut names = Vec::new();
    walk(&<Cli as clap::CommandFactory>::command(), &mut names);
    mdproxy_config::ProcessEnv::new(names)
}
