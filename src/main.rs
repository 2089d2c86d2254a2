//! The `mdproxy` command: parses the command line, loads config, starts tracing and
//! calls the library. Nothing else lives here.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Parser, Subcommand};
use mdproxy::cache::market::SystemClock;
use mdproxy::config::{Config, LogFormat, Secret};
use mdproxy::sim::SimConfig;

#[cfg(all(feature = "jemalloc", feature = "mimalloc"))]
compile_error!("choose one allocator feature: jemalloc or mimalloc");

#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// A caching read-through proxy for a Chinese market data API.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
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
enum Command {
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
        #[arg(long, default_value = "127.0.0.1:9090")]
        listen: String,
        /// API key the simulator requires, as a bearer token, an `x-api-key` header or
        /// query parameter (empty: none).
        #[arg(long, default_value = "sim-upstream-token")]
        token: String,
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
    /// Prints README's generated tables (endpoints, configuration keys).
    #[command(hide = true)]
    Docs,
    /// Prints the OpenAPI 3.1 document of the API (also served at /api/v1/openapi.json).
    Openapi,
    /// Validates FILE and prints the effective TTL table per endpoint.
    CheckConfig {
        /// TOML configuration file.
        file: PathBuf,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // A background thread returns freed pages to the system (after jemalloc's decay
    // time), so RSS follows the cache and the streams down after a flood; without
    // it pages are purged only while the process keeps allocating.
    #[cfg(feature = "jemalloc")]
    if let Err(e) = tikv_jemalloc_ctl::background_thread::write(true) {
        eprintln!("jemalloc background thread not started: {e}");
    }
    // `serve` reads its file first: the log format may be in it, and a file that
    // does not load is reported on stderr before anything else happens.
    let served = match &cli.command {
        Command::Serve { config } => match mdproxy::ops::reload::load(config, &process_env()) {
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
    // Flushes the log's background writer when main returns.
    let _log_writer = init_logging(&cli.log, format);
    if let Command::Docs = &cli.command {
        print!(
            "{}\n{}\n{}",
            mdproxy::api::catalog::catalog().markdown_table(),
            mdproxy::ops::report::config_reference(),
            mdproxy::ops::report::ttl_table(&Config::default())
        );
        return ExitCode::SUCCESS;
    }
    if let Command::Openapi = &cli.command {
        let document = mdproxy::api::openapi::document();
        println!(
            "{}",
            serde_json::to_string_pretty(&document).expect("a JSON value always serialises")
        );
        return ExitCode::SUCCESS;
    }
    if let Command::CheckConfig { file } = &cli.command {
        return match mdproxy::ops::reload::load(file, &process_env()) {
            Ok(config) => {
                print!("{}", mdproxy::ops::report::ttl_table(&config));
                println!("{}: OK", file.display());
                ExitCode::SUCCESS
            }
            Err(e) => {
                // One problem a line (`FILE:LINE: key: what`), then their number.
                eprintln!("{e}");
                ExitCode::FAILURE
            }
        };
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("the tokio runtime starts");
    match runtime.block_on(run(cli.command, served)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Logs to stderr, filtered by `filter` (tokio-cron-scheduler's own chatter is
/// kept at `warn` unless the filter names it), as text or JSON lines. Lines are
/// written by a background thread (tracing-appender), so a slow stderr (a pipe to
/// journald under load) never blocks a worker in the middle of a request; when its
/// buffer is full, logging waits rather than dropping lines. The returned guard
/// flushes it.
fn init_logging(filter: &str, format: LogFormat) -> tracing_appender::non_blocking::WorkerGuard {
    let mut directives = filter.to_owned();
    if !directives.contains("tokio_cron_scheduler") {
        directives.push_str(",tokio_cron_scheduler=warn");
    }
    let filter = tracing_subscriber::EnvFilter::try_new(&directives).unwrap_or_else(|e| {
        eprintln!("warning: log filter {filter:?} is invalid ({e}); using info");
        tracing_subscriber::EnvFilter::new("info,tokio_cron_scheduler=warn")
    });
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let (writer, guard) = tracing_appender::non_blocking::NonBlockingBuilder::default()
        .lossy(false)
        .thread_name("mdproxy-log")
        .finish(std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer);
    match format {
        // Colours only on a terminal: journald and log files get plain text.
        LogFormat::Text => builder.with_ansi(ansi).init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .init(),
    }
    guard
}

async fn run(command: Command, served: Option<Config>) -> Result<(), Box<dyn std::error::Error>> {
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
            let options = mdproxy::demo::DemoOptions {
                listen,
                admin_listen,
                token: Secret::new(token.clone()),
                admin_token: Secret::new(admin_token.clone()),
                cors_origins: cors_origins.clone(),
                latency_ms: upstream_latency_ms,
            };
            let demo = mdproxy::demo::start(&options, clock).await?;
            let base = demo.proxy.base_url();
            println!(
                "mdproxy demo: proxy {base} in front of a simulated upstream at {}",
                demo.sim.base_url()
            );
            if let Some(admin) = demo.proxy.admin_addr {
                println!("admin: http://{admin}/status and http://{admin}/metrics");
                println!(
                    "purge: curl -s -X POST -H 'Authorization: Bearer {admin_token}' 'http://{admin}/purge?endpoint=/stock/detail/{{code}}'"
                );
            }
            for origin in &cors_origins {
                println!("CORS: browsers at {origin} may call the proxy");
            }
            println!(
                "try:\n  curl -s -H 'Authorization: Bearer {token}' {base}/stock/detail/600519 -D - -o /dev/null"
            );
            println!(
                "  curl -s -H 'Authorization: Bearer {token}' '{base}/stock/kline?code=000001&period=week&fqt=pre' | head -c 300; echo"
            );
            mdproxy::shutdown::signal().await;
            demo.shutdown().await;
            Ok(())
        }
        Command::Serve { config: path } => {
            let env = process_env();
            let config = served.expect("serve's config is loaded before logging starts");
            let proxy = mdproxy::app::start(&config, clock).await?;
            proxy.watch_config(path, Arc::new(env));
            println!(
                "mdproxy serving {} in front of {}",
                proxy.base_url(),
                config.upstream.base_url
            );
            mdproxy::shutdown::signal().await;
            proxy.shutdown().await;
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
                token: Secret::new(token),
                latency_ms,
                jitter_ms,
                error_rate,
                stream_interval_ms,
                dirty_bodies,
            };
            let sim = mdproxy::sim::start(&config, clock).await?;
            println!(
                "simulated upstream at {} (counters at http://{}/_sim/stats)",
                sim.base_url(),
                sim.addr
            );
            mdproxy::shutdown::signal().await;
            sim.shutdown().await;
            Ok(())
        }
        Command::CheckConfig { .. } | Command::Docs | Command::Openapi => Ok(()),
    }
}

/// The environment configuration reads, less the `MDPROXY_*` variables the command
/// line itself reads (clap's `env = ...`, such as `MDPROXY_LOG`): those are not
/// configuration keys, and not misspellings either.
fn process_env() -> mdproxy::config::ProcessEnv {
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
    mdproxy::config::ProcessEnv::new(names)
}
