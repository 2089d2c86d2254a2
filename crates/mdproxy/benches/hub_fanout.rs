//! Quote hub fan-out under thousands of subscribers, on loopback.
//!
//! The simulated upstream runs in this process with a clock that moves one 3 s
//! snapshot per poll, so every quote changes every tick; the proxy runs as a child
//! process (`mdproxy serve`) so that its memory can be read apart from the clients'.
//! N raw-socket subscribers (5 codes each, from a pool of 200) read the stream.
//!
//! Reports, per tick, the time from the upstream poll request arriving at the
//! simulator to the *last* subscriber receiving that tick's event (median and p99
//! over ticks), the same for every single delivery, and the proxy's resident memory
//! per subscriber. `HUB_SUBSCRIBERS` (default 2000) and `HUB_TICKS` (default 20).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mdproxy_market::ManualClock;
use mdproxy_sim::SimConfig;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Mutex;

const INTERVAL_MS: u64 = 1_000;

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// Reads one subscriber's stream and records when each tick's first event arrived.
async fn subscriber(
    addr: std::net::SocketAddr,
    codes: String,
    seen: Arc<Mutex<Vec<(u64, Instant)>>>,
    stop: Instant,
) {
    let Ok(mut sock) = tokio::net::TcpStream::connect(addr).await else {
        return;
    };
    let req = format!(
        "GET /api/v1/stock/indicator/realtime/sse?codes={codes}&pz=20 HTTP/1.1\r\nHost: bench\r\nAuthorization: Bearer bench\r\n\r\n"
    );
    if sock.write_all(req.as_bytes()).await.is_err() {
        return;
    }
    let mut buf = vec![0u8; 16 * 1024];
    let mut carry = String::new();
    let mut last_id = 0;
    let mut mine = Vec::new();
    while Instant::now() < stop {
        let n = match tokio::time::timeout(Duration::from_secs(5), sock.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(n)) => n,
            Err(_) => continue,
        };
        let now = Instant::now();
        carry.push_str(&String::from_utf8_lossy(&buf[..n]));
        // Scan complete lines for `id: N`.
        let mut consumed = 0;
        while let Some(end) = carry[consumed..].find('\n') {
            let line = &carry[consumed..consumed + end];
            if let Some(id) = line
                .strip_prefix("id: ")
                .and_then(|v| v.trim().parse::<u64>().ok())
                && id > last_id
            {
                last_id = id;
                mine.push((id, now));
            }
            consumed += end + 1;
        }
        carry.drain(..consumed);
    }
    seen.lock().await.extend(mine);
}

fn main() {
    let subscribers = env_or("HUB_SUBSCRIBERS", 2_000);
    let ticks = env_or("HUB_TICKS", 20) as u64;
    let _ = rlimit::increase_nofile_limit(u64::MAX);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async move {
        // Monday 10:00 China time, in session; one snapshot per poll.
        let clock = ManualClock::new(
            chrono::DateTime::parse_from_rfc3339("2026-03-02T02:00:00Z").expect("instant").into(),
        );
        let sim = mdproxy_sim::start(
            &SimConfig {
                listen: "127.0.0.1:0".into(),
                token: "bench-upstream".into(),
                ..SimConfig::default()
            },
            clock.clone(),
        )
        .await
        .expect("sim starts");
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").expect("port");
            l.local_addr().expect("addr").port()
        };
        let dir = std::env::temp_dir().join(format!("mdproxy-hub-bench-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let config = dir.join("bench.toml");
        std::fs::write(
            &config,
            format!(
                "[server]\nlisten = \"127.0.0.1:{port}\"\nmax_connections = 50000\n[auth]\ntokens = [\"bench\"]\n\
                 [upstream]\nbase_url = \"{}\"\ntoken = \"bench-upstream\"\n[scheduler]\nenabled = false\n\
                 [limits]\nupstream_rps = 0\n[hub]\nsession_interval_ms = {INTERVAL_MS}\nclosed_interval_ms = {INTERVAL_MS}\n\
                 batch_size = 1000\nmax_streams = 100000\nmax_streams_per_token = 100000\nstall_timeout_secs = 600\n",
                sim.base_url()
            ),
        )
        .expect("config written");
        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_mdproxy"))
            .args(["serve", "--log", "warn", "--config"])
            .arg(&config)
            .stdout(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("mdproxy serve starts");
        let pid = child.id().expect("pid");
        let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().expect("addr");
        for _ in 0..100 {
            if tokio::net::TcpStream::connect(addr).await.is_ok() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        let rss_before = rss_kib(pid);

        // Reference, same run: the upstream's own time to answer one poll of the
        // whole union (what any poller pays before the hub fans out).
        let pool_all: Vec<String> = mdproxy_sim::universe::universe().stocks.iter().take(200).map(|s| s.code.clone()).collect();
        let client = reqwest::Client::builder().no_proxy().build().expect("client");
        let mut upstream_times = Vec::new();
        for _ in 0..9 {
            let t = Instant::now();
            let body = client
                .get(format!("{}/stock/list?codes={}", sim.base_url(), pool_all.join(",")))
                .bearer_auth("bench-upstream")
                .send()
                .await
                .expect("sim answers")
                .bytes()
                .await
                .expect("body");
            assert!(body.len() > 10_000);
            upstream_times.push(t.elapsed());
        }
        upstream_times.sort();
        let reference_hits = sim.hits("/stock/list");

        let pool: Vec<String> = mdproxy_sim::universe::universe().stocks.iter().take(200).map(|s| s.code.clone()).collect();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let connect_start = Instant::now();
        let stop = Instant::now() + Duration::from_secs(8) + Duration::from_millis(INTERVAL_MS * (ticks + 3));
        let mut tasks = Vec::with_capacity(subscribers);
        for i in 0..subscribers {
            let codes: Vec<&str> = (0..5).map(|k| pool[(i * 7 + k * 31) % pool.len()].as_str()).collect();
            tasks.push(tokio::spawn(subscriber(addr, codes.join(","), Arc::clone(&seen), stop)));
            if i % 200 == 199 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        // Let every subscriber get its snapshot, then start moving the market.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let connected = connect_start.elapsed();
        let first_measured = sim.hits("/stock/list") + 1 - reference_hits;
        let ticker_clock = clock.clone();
        let ticker = tokio::spawn(async move {
            for _ in 0..(ticks + 2) {
                ticker_clock.advance(Duration::from_secs(3));
                tokio::time::sleep(Duration::from_millis(INTERVAL_MS)).await;
            }
        });
        tokio::time::sleep(Duration::from_millis(INTERVAL_MS * ticks + 500)).await;
        let rss_during = rss_kib(pid);
        let _ = ticker.await;
        let last_measured = sim.hits("/stock/list") - reference_hits;
        let arrivals = sim.arrivals();
        drop(tasks); // subscribers stop at `stop`; results are in `seen` only after they end
        tokio::time::sleep(Duration::from_millis(100)).await;
        let _ = child.kill().await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        let seen = seen.lock().await.clone();

        // Tick k is the k-th poll request (one batch per poll).
        let mut by_tick: HashMap<u64, Vec<Instant>> = HashMap::new();
        for (id, at) in seen {
            by_tick.entry(id).or_default().push(at);
        }
        let mut last_latency = Vec::new();
        let mut every_latency = Vec::new();
        let mut complete = 0;
        for tick in first_measured..=last_measured {
            // The reference requests came first; then the hub's polls, one per tick.
            let Some(poll) = arrivals.get((reference_hits + tick) as usize - 1) else { continue };
            let Some(got) = by_tick.get(&tick) else { continue };
            if got.len() == subscribers {
                complete += 1;
            }
            for at in got {
                every_latency.push(at.saturating_duration_since(*poll));
            }
            if let Some(last) = got.iter().max() {
                last_latency.push(last.saturating_duration_since(*poll));
            }
        }
        last_latency.sort();
        every_latency.sort();
        println!("hub_fanout: {subscribers} subscribers x 5 codes (200-code union), poll every {INTERVAL_MS} ms, {} ticks measured ({complete} reached every subscriber), connected in {connected:?}", last_latency.len());
        println!(
            "  upstream poll -> last subscriber's event: median {:?}, p99 {:?}, max {:?}",
            percentile(&last_latency, 0.5),
            percentile(&last_latency, 0.99),
            last_latency.last().copied().unwrap_or_default()
        );
        println!(
            "  upstream poll -> each delivery ({} events): median {:?}, p99 {:?}",
            every_latency.len(),
            percentile(&every_latency, 0.5),
            percentile(&every_latency, 0.99)
        );
        println!(
            "  reference: the upstream answering one poll of the union: median {:?}",
            percentile(&upstream_times, 0.5)
        );
        println!(
            "  proxy RSS: {rss_before} KiB idle, {rss_during} KiB streaming: {:.1} KiB per subscriber",
            (rss_during.saturating_sub(rss_before)) as f64 / subscribers as f64
        );
        std::fs::remove_dir_all(&dir).ok();
        sim.shutdown().await;
    });
}
