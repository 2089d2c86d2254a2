//! The simulated upstream on a fast clock, for `scripts/fanout.sh`: every quote moves
//! on every hub poll, whatever the time of day outside.
//!
//! `mdproxy sim` reads the wall clock, so its quotes move only in the Shanghai session
//! (09:15–15:00 on weekdays) and only once per 3 s snapshot. This runs the same
//! simulator with a clock that starts on a Monday at 09:30 China time and runs
//! `--speed` times faster than real time (6 by default: two snapshots per real second,
//! so a 1 s poll always sees every quote changed), wrapping back to 09:30 after five
//! simulated hours. `--codes-out` writes the first `--codes` stock codes of the
//! simulated universe, one a line, for the subscribers to choose from.

use std::sync::Arc;
use std::time::Instant;

use chrono::{DateTime, Duration, Utc};
use clap::Parser;
use mdproxy_market::Clock;
use mdproxy_sim::SimConfig;

#[derive(Parser)]
struct Args {
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: String,
    #[arg(long, default_value = "sim-secret")]
    token: String,
    /// Simulated seconds per real second.
    #[arg(long, default_value_t = 6.0)]
    speed: f64,
    /// Where to write the codes of the union (one a line).
    #[arg(long)]
    codes_out: Option<std::path::PathBuf>,
    #[arg(long, default_value_t = 2000)]
    codes: usize,
}

/// A clock running `speed` times real time from `base`, wrapping after `span`.
struct FastClock {
    started: Instant,
    base: DateTime<Utc>,
    speed: f64,
    span: Duration,
}

impl Clock for FastClock {
    fn now(&self) -> DateTime<Utc> {
        let simulated_ms = (self.started.elapsed().as_secs_f64() * self.speed * 1000.0) as i64;
        self.base + Duration::milliseconds(simulated_ms % self.span.num_milliseconds())
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let clock = Arc::new(FastClock {
        started: Instant::now(),
        // Monday 2 March 2026, 09:30 in Shanghai.
        base: DateTime::parse_from_rfc3339("2026-03-02T01:30:00Z")?.into(),
        speed: args.speed,
        span: Duration::hours(5),
    });
    if let Some(path) = &args.codes_out {
        let stocks = &mdproxy_sim::universe::universe().stocks;
        if stocks.len() < args.codes {
            return Err(format!("the simulated universe has only {} stocks", stocks.len()).into());
        }
        let codes: Vec<&str> = stocks
            .iter()
            .take(args.codes)
            .map(|s| s.code.as_str())
            .collect();
        std::fs::write(path, codes.join("\n") + "\n")?;
    }
    let sim = mdproxy_sim::start(
        &SimConfig {
            listen: args.listen,
            token: args.token,
            ..SimConfig::default()
        },
        clock,
    )
    .await?;
    println!("{}", sim.base_url());
    mdproxy_core::shutdown::Signals::install()
        .expect("signal handlers install")
        .recv()
        .await;
    sim.shutdown().await;
    Ok(())
}
