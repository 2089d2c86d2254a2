//! Which compression level for each coding: the ratio and the CPU time of gzip,
//! brotli and zstd at several levels on the simulator's own answers (a 7-stock list
//! of 2.8 KB, 000001's weekly K-line of 136 KB and daily one of 657 KB). Prints one
//! markdown table (docs/BENCHMARKS.md "Compression levels" holds a run's).
//!
//! `cargo run --release --example encoding_levels` (under the CPU lock); `ROUNDS`
//! compressions per figure, the median taken (default 15).

use std::sync::Arc;
use std::time::{Duration, Instant};

use mdproxy_core::cache::encoding::Coding;
use mdproxy_market::SystemClock;
use mdproxy_sim::SimConfig;

const ANSWERS: [(&str, &str); 3] = [
    (
        "7-stock list",
        "/stock/list?codes=600519,000001,600036,000858,601318,600000,300750",
    ),
    ("weekly K-line", "/stock/kline?code=000001&period=week"),
    ("daily K-line", "/stock/kline?code=000001&period=day"),
];

const LEVELS: [(Coding, &[i32]); 3] = [
    (Coding::Gzip, &[1, 4, 6, 9]),
    (Coding::Brotli, &[1, 4, 5, 6, 7, 9, 11]),
    (Coding::Zstd, &[1, 3, 6, 9, 12, 19]),
];

#[tokio::main]
async fn main() {
    let rounds: usize = std::env::var("ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(15);
    let config = SimConfig {
        listen: "127.0.0.1:0".into(),
        token: "levels".into(),
        ..SimConfig::default()
    };
    let sim = mdproxy_sim::start(&config, Arc::new(SystemClock))
        .await
        .expect("the simulator starts");
    let client = reqwest::Client::new();
    println!("| answer | coding | level | bytes | ratio | ms per compression |");
    println!("|---|---|---|---|---|---|");
    for (label, target) in ANSWERS {
        let body = client
            .get(format!("{}{target}", sim.base_url()))
            .bearer_auth("levels")
            .send()
            .await
            .and_then(|r| r.error_for_status())
            .expect("the simulator answers")
            .bytes()
            .await
            .expect("a body");
        println!(
            "| {label} ({:.1} KB) | identity | - | {} | 1.000 | - |",
            body.len() as f64 / 1000.0,
            body.len()
        );
        for (coding, levels) in LEVELS {
            for &level in levels {
                let mut times: Vec<Duration> = Vec::with_capacity(rounds);
                let mut size = 0;
                for _ in 0..rounds {
                    let started = Instant::now();
                    let packed = coding
                        .compress_at(&body, level)
                        .expect("compresses a memory buffer");
                    times.push(started.elapsed());
                    size = packed.len();
                }
                times.sort();
                let marker = if level == coding.level() {
                    " (chosen)"
                } else {
                    ""
                };
                println!(
                    "| {label} | {} | {level}{marker} | {size} | {:.3} | {:.3} |",
                    coding.as_str(),
                    size as f64 / body.len() as f64,
                    times[times.len() / 2].as_secs_f64() * 1000.0
                );
            }
        }
    }
    sim.shutdown().await;
}
