//! What an operator reads in the log: one access line per request (JSON here), the
//! request ID echoed and carried to the upstream with the trace context, the
//! start-up probe's verdict, a failing quote poll once, no cron-library chatter, and
//! never a secret.

use crate::support;

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

const CLIENT_SECRET: &str = "log-client-secret-77";
const UPSTREAM_SECRET: &str = "log-upstream-secret-88";

/// A hand-written upstream: answers every request with one small envelope and
/// sends each request head it received to `heads`.
async fn recording_upstream() -> (String, tokio::sync::mpsc::UnboundedReceiver<String>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let tx = tx.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    let Ok(n) = stream.read(&mut chunk).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        let head: Vec<u8> = buf.drain(..end + 4).collect();
                        let _ = tx.send(String::from_utf8_lossy(&head).into_owned());
                        let body = br#"{"success":true,"data":{"ok":1}}"#;
                        let answer = format!(
                            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
                            body.len()
                        );
                        if stream.write_all(answer.as_bytes()).await.is_err()
                            || stream.write_all(body).await.is_err()
                        {
                            return;
                        }
                    }
                }
            });
        }
    });
    (format!("http://{addr}/api/v1"), rx)
}

/// The request ID is echoed (the client's, or a new one), and the upstream request
/// a miss causes carries it and the client's trace with a new parent span.
#[tokio::test]
async fn request_ids_and_trace_context_reach_the_upstream() {
    let (base_url, mut heads) = recording_upstream().await;
    let env = support::start_with(|_| {}, |c| c.upstream.base_url = base_url, None).await;
    let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let r = env
        .client
        .get(env.url("/market/indices"))
        .bearer_auth(support::TOKEN)
        .header("x-request-id", "req-abc-123")
        .header("traceparent", format!("00-{trace}-00f067aa0ba902b7-01"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(support::header(&r, "x-request-id"), "req-abc-123");
    let head = tokio::time::timeout(Duration::from_secs(10), heads.recv())
        .await
        .unwrap()
        .unwrap()
        .to_ascii_lowercase();
    assert!(head.contains("x-request-id: req-abc-123\r\n"), "{head}");
    let parent = head
        .lines()
        .find_map(|l| l.strip_prefix("traceparent: "))
        .unwrap_or_else(|| panic!("no traceparent in {head}"));
    assert!(parent.starts_with(&format!("00-{trace}-")), "{parent}");
    assert!(parent.ends_with("-01"));
    assert!(!parent.contains("00f067aa0ba902b7"), "a new parent span");
    // A hit has an ID too, a generated one when the client sent none (or a bad one).
    for sent in [None, Some("has space"), Some(&*"x".repeat(200))] {
        let mut req = env
            .client
            .get(env.url("/market/indices"))
            .bearer_auth(support::TOKEN);
        if let Some(id) = sent {
            req = req.header("x-request-id", id);
        }
        let r = req.send().await.unwrap();
        let id = support::header(&r, "x-request-id");
        assert_eq!(id.len(), 16, "{id}");
        assert!(id.bytes().all(|b| b.is_ascii_hexdigit()), "{id}");
    }
    // Errors carry it as well.
    let r = env
        .client
        .get(env.url("/market/indices"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    assert_eq!(support::header(&r, "x-request-id").len(), 16);
}

/// Counts the members named `name` at the top level of a JSON object's text (serde
/// keeps only the last of two equal keys, so the text is what tells).
fn top_level_keys(line: &str, name: &str) -> usize {
    let (mut depth, mut count, mut in_string, mut escaped) = (0usize, 0, false, false);
    let bytes = line.as_bytes();
    let quoted = format!("\"{name}\":");
    for (i, &b) in bytes.iter().enumerate() {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'{' | b'[' => depth += 1,
            b'}' | b']' => depth = depth.saturating_sub(1),
            b'"' => {
                if depth == 1 && line[i..].starts_with(&quoted) {
                    count += 1;
                }
                in_string = true;
            }
            _ => {}
        }
    }
    count
}

/// The address `serve` (logging JSON) says it serves at, from its banner event.
async fn serving_at(serve: &mut support::Watched) -> String {
    let banner = serve
        .line_where(|line| {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            v["banner"]
                .as_str()
                .is_some_and(|b| b.starts_with("mdproxy serving "))
        })
        .await;
    let v: serde_json::Value = serde_json::from_str(&banner).unwrap();
    let rest = v["banner"]
        .as_str()
        .unwrap()
        .strip_prefix("mdproxy serving ")
        .unwrap();
    rest.split_whitespace().next().unwrap().to_owned()
}

/// `mdproxy serve --log-format json`: the probe's verdict at start, one JSON access
/// line per request with every field, no cron-library lines, no secret anywhere;
/// every line is one JSON object whose keys are each there once (the upstream
/// fetch's line carried a second `target`), the start-up banner is a log event too
/// (nothing on stdout), and a listener is written as its address.
#[tokio::test]
async fn serve_writes_json_access_lines_and_the_probe_verdict() {
    let sim = support::sim_with_token(UPSTREAM_SECRET).await;
    let (dir, path) = support::serve_toml(
        "mdproxy-logs",
        &format!(
            "[server]\nlisten = \"127.0.0.1:0\"\n[auth]\ntokens = [\"{CLIENT_SECRET}\"]\n[upstream]\nbase_url = \"{}\"\ntoken = \"{UPSTREAM_SECRET}\"\n[log]\nformat = \"json\"\n",
            sim.base_url()
        ),
    );
    let mut child = support::serve(
        &path,
        &[],
        std::process::Stdio::piped(),
        std::process::Stdio::piped(),
    );
    let mut stdout = child.stdout.take().unwrap();
    let mut serve = support::Watched::new(child);
    // The banner, as a log event, says where it listens.
    let base = serving_at(&mut serve).await;
    let client = support::client();
    let url = format!("{base}/stock/detail/600519");
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut up = false;
    while Instant::now() < deadline && !up {
        up = client
            .get(&url)
            .bearer_auth(CLIENT_SECRET)
            .header("x-request-id", "log-test-1")
            .send()
            .await
            .is_ok_and(|r| r.status() == 200);
        if !up {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    assert!(up, "serve came up");
    let unauthorized = client
        .get(&url)
        .header("x-api-key", "wrong-key-99")
        .send()
        .await
        .unwrap();
    assert_eq!(unauthorized.status(), 401);
    let (mut access, mut refused, mut probe, mut prewarm) = (None, None, None, None);
    let mut fetch = None;
    let mut wanted = |line: &str| {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}"));
        if v["target"] == "access" && v["request_id"] == "log-test-1" {
            access = Some(v);
        } else if v["target"] == "access" && v["status"] == 401 {
            refused = Some(v);
        } else if v["fields"]["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("upstream probe"))
            || v["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("upstream probe"))
        {
            probe = Some(v);
        } else if v["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("start-up prewarm done"))
        {
            prewarm = Some(v);
        } else if v["message"] == "upstream fetch" && v["key"] == "/stock/detail/600519" {
            // The request's own fetch (the start-up probe's may come before or after).
            fetch = Some(v);
        }
        access.is_some()
            && refused.is_some()
            && probe.is_some()
            && prewarm.is_some()
            && fetch.is_some()
    };
    // The lines read while waiting for the banner count too: the probe's verdict
    // may come before it.
    let mut all_seen = false;
    for line in serve.seen.clone() {
        all_seen = wanted(&line);
    }
    if !all_seen {
        serve.line_where(&mut wanted).await;
    }
    // A clean stop: the listener's closing line names its address.
    serve.signal("TERM");
    let closed = serve
        .line_where(|line| {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            v.get("listener").is_some()
        })
        .await;
    let closed: serde_json::Value = serde_json::from_str(&closed).unwrap();
    let listener = closed["listener"].as_str().unwrap();
    assert!(listener.starts_with("127.0.0.1:"), "{closed}");
    assert!(serve.exit().await.success());
    let seen = std::mem::take(&mut serve.seen);
    let mut out = String::new();
    stdout.read_to_string(&mut out).await.unwrap();
    assert_eq!(out, "", "with JSON logs nothing else is written to stdout");
    std::fs::remove_dir_all(&dir).ok();
    let fetch = fetch.unwrap();
    assert_eq!(fetch["priority"], "client", "{fetch}");
    let access = access.unwrap();
    assert_eq!(access["level"], "INFO");
    assert_eq!(access["method"], "GET");
    assert_eq!(access["path"], "/api/v1/stock/detail/600519");
    assert_eq!(access["endpoint"], "/stock/detail/{code}");
    assert_eq!(access["key"], "/stock/detail/600519");
    assert_eq!(access["status"], 200);
    assert_eq!(access["client"], "token0");
    assert!(
        access["cache"] == "MISS" || access["cache"] == "HIT",
        "{access}"
    );
    assert!(access["bytes"].as_u64().unwrap() > 0, "{access}");
    assert!(access["duration_ms"].as_f64().is_some(), "{access}");
    assert!(
        access["peer"].as_str().unwrap().starts_with("127.0.0.1:"),
        "{access}"
    );
    let refused = refused.unwrap();
    assert_eq!(refused["code"], "unauthorized");
    assert_eq!(refused["client"], "-");
    let probe = probe.unwrap();
    assert_eq!(probe["level"], "INFO", "{probe}");
    // The start-up prewarm ends with one summary line, whatever became of it.
    let prewarm = prewarm.unwrap();
    assert!(prewarm["jobs"].as_u64().unwrap() > 0, "{prewarm}");
    assert!(prewarm["filled"].as_u64().is_some(), "{prewarm}");
    for line in &seen {
        assert!(top_level_keys(line, "target") <= 1, "a key twice: {line}");
        for secret in [CLIENT_SECRET, UPSTREAM_SECRET, "wrong-key-99"] {
            assert!(!line.contains(secret), "a secret in the log: {line}");
        }
        assert!(
            !line.contains("tokio_cron_scheduler"),
            "cron chatter: {line}"
        );
    }
}

/// `mdproxy demo` with text logs: a purge whose prefix carries `%0a` (a newline, once
/// decoded) leaves one log line with the newline escaped, not a second line the
/// admin wrote.
#[tokio::test]
async fn control_characters_cannot_forge_a_text_log_line() {
    let support::DemoProcess {
        process: mut demo,
        admin,
        ..
    } = support::DemoProcess::start(&[
        "--admin-token",
        "log-admin-t",
        "--log",
        "info",
        "--log-format",
        "text",
    ])
    .await;
    let admin = format!("http://{admin}");
    let client = support::client();
    let purge = |query: &'static str| {
        client
            .post(format!("{admin}/purge?{query}"))
            .bearer_auth("log-admin-t")
            .send()
    };
    let r = purge("prefix=/stock/%0aINFO%20forged%20line%0d")
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let r = purge("prefix=/marker/").await.unwrap();
    assert_eq!(r.status(), 200);
    demo.line_where(|line| line.contains("/marker/")).await;
    let seen = &demo.seen;
    let purged: Vec<&String> = seen.iter().filter(|l| l.contains("purged")).collect();
    assert!(
        purged
            .iter()
            .any(|l| l.contains(r"/stock/\nINFO forged line\r")),
        "the newline is escaped in the purge's own line: {seen:#?}"
    );
    assert!(
        !seen.iter().any(|l| l.starts_with("INFO forged")),
        "no line of the admin's making: {seen:#?}"
    );
    demo.stop().await;
}

/// A quote poll whose requests all fail (three codes in batches of one, the
/// upstream answering 500, then its breaker open) writes one warning, not one per
/// request of every poll: by the time the upstream has refused six requests (two
/// polls) and the breaker opened, the old hub had written one line per request.
#[tokio::test]
async fn a_failing_quote_poll_is_logged_once() {
    let sim = support::sim_with_token(UPSTREAM_SECRET).await;
    sim.fail_next(1_000_000);
    let (dir, path) = support::serve_toml(
        "mdproxy-poll-log",
        &format!(
            "[server]\nlisten = \"127.0.0.1:0\"\n[auth]\ntokens = [\"{CLIENT_SECRET}\"]\n[upstream]\nbase_url = \"{}\"\ntoken = \"{UPSTREAM_SECRET}\"\nprobe_target = \"\"\n[scheduler]\nenabled = false\n[hub]\nsession_interval_ms = 50\nclosed_interval_ms = 50\nbatch_size = 1\n[log]\nformat = \"json\"\n",
            sim.base_url()
        ),
    );
    let child = support::serve(
        &path,
        &[],
        std::process::Stdio::null(),
        std::process::Stdio::piped(),
    );
    let mut serve = support::Watched::new(child);
    let base = serving_at(&mut serve).await;
    let stream = support::client()
        .get(format!(
            "{base}/stock/indicator/realtime/sse?codes=600519,000001,300750"
        ))
        .bearer_auth(CLIENT_SECRET)
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), 200);
    // Two polls' requests reached the upstream, and the breaker opened after five.
    assert!(
        support::eventually(Duration::from_secs(20), || sim.hits("/stock/list") >= 5).await,
        "the hub polled"
    );
    serve
        .line_where(|line| line.contains("circuit breaker opened"))
        .await;
    drop(stream);
    serve.stop().await;
    std::fs::remove_dir_all(&dir).ok();
    let polls: Vec<&String> = serve
        .seen
        .iter()
        .filter(|l| l.contains("\"level\":\"WARN\"") && l.contains("quote poll"))
        .collect();
    assert_eq!(polls.len(), 1, "{polls:#?}");
    let warning: serde_json::Value = serde_json::from_str(polls[0]).unwrap();
    assert_eq!(warning["failed"], 3, "{warning}");
    assert_eq!(warning["requests"], 3, "{warning}");
}

/// What a test's in-process log lines were written to.
#[derive(Clone, Default)]
struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

/// Security review: credentials in `upstream.base_url` (`http://user:pass@host`)
/// were printed in the probe's log lines and on the unauthenticated `/status` and
/// `/status.json`. A file with them is refused (tests of `config`); a configuration
/// built in code shows them nowhere either. The test runs on one thread, so every
/// task logs to its subscriber.
#[tokio::test]
async fn credentials_in_a_base_url_are_shown_nowhere() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_ansi(false)
        .with_max_level(tracing::Level::INFO)
        .with_writer(move || writer.clone())
        .finish();
    let _log = tracing::subscriber::set_default(subscriber);
    let env = support::start_with(
        |_| {},
        |c| {
            c.upstream.base_url =
                c.upstream
                    .base_url
                    .replacen("http://", "http://probe-user:s3cret-pw@", 1);
            c.upstream.probe_target = "/market/indices".into();
            c.admin.listen = "127.0.0.1:0".into();
        },
        None,
    )
    .await;
    assert!(
        support::eventually(Duration::from_secs(10), || captured
            .text()
            .contains("upstream probe"))
        .await,
        "the probe logged its verdict: {}",
        captured.text()
    );
    let admin = format!("http://{}", env.proxy.admin_addr.unwrap());
    let status = support::text(&format!("{admin}/status.json")).await;
    assert!(status.contains("http://***@127.0.0.1:"), "{status}");
    let page = support::text(&format!("{admin}/status")).await;
    let logs = captured.text();
    assert!(logs.contains("http://***@127.0.0.1:"), "{logs}");
    for shown in [&status, &page, &logs] {
        assert!(
            !shown.contains("s3cret-pw") && !shown.contains("probe-user"),
            "{shown}"
        );
    }
}
