//! The command line: `check-config` accepts the example file, prints the TTL table,
//! and refuses a bad file with exit 1 and every problem named with its key and line;
//! a misspelt `MDPROXY_*` variable refuses `check-config` and `serve`.

use crate::support;

use std::process::Command;

/// The `MDPROXY_*` variables of the test's own environment, kept from the children:
/// every test sets the ones it means.
fn inherited() -> Vec<std::ffi::OsString> {
    std::env::vars_os()
        .map(|(name, _)| name)
        .filter(|name| name.to_string_lossy().starts_with("MDPROXY_"))
        .collect()
}

fn mdproxy() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_mdproxy"));
    for name in inherited() {
        command.env_remove(name);
    }
    command
}

/// The secrets deploy/mdproxy.toml's header asks for in the environment.
const SECRETS: [(&str, &str); 2] = [
    ("MDPROXY_AUTH_TOKENS", "5c0e9a7d3b1f4e28"),
    ("MDPROXY_UPSTREAM_TOKEN", "a81f3c6e0d9b2745"),
];

/// `mdproxy` with the example's secrets in its environment.
fn with_secrets() -> Command {
    let mut command = mdproxy();
    command.envs(SECRETS);
    command
}

/// The example configuration passes and the effective TTLs are printed.
#[test]
fn check_config_prints_the_ttl_table() {
    let out = with_secrets()
        .args([
            "check-config",
            concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy/mdproxy.toml"),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("/market/indices"));
    assert!(text.contains("in:fresh") && text.contains("out:fresh"));
    // One line per endpoint and class its answers can have (the feed twice: its
    // head and its cursor pages; a K-line three times...); never the stream.
    let rows: usize = mdproxy_api::catalog::catalog()
        .endpoints()
        .iter()
        .filter(|e| !e.streaming)
        .map(|e| e.classes().len())
        .sum();
    let table = text
        .lines()
        .filter(|l| l.starts_with('/') && l.split_whitespace().count() == 8);
    assert_eq!(table.count(), rows);
    assert!(rows > mdproxy_api::catalog::catalog().len(), "{rows}");
}

/// `mdproxy openapi | head`, `mdproxy check-config FILE | head`: a reader that went
/// away before the command wrote (a pipe whose read end is closed) ends it quietly,
/// exit 0 and no panic, rather than with "failed printing to stdout".
#[test]
fn a_closed_stdout_ends_the_command_quietly() {
    let (dir, path) = support::scratch_file("mdproxy-pipe", "pipe.toml");
    std::fs::write(
        &path,
        "[auth]\ntokens = [\"pipe-client-key-1\"]\n[upstream]\nbase_url = \"http://127.0.0.1:9/api/v1\"\ntoken = \"pipe-upstream-key-1\"\n",
    )
    .unwrap();
    let file = path.to_str().unwrap();
    for args in [&["openapi"][..], &["check-config", file], &["docs"]] {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let out = mdproxy().args(args).stdout(writer).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "{args:?} exited {}: {stderr}",
            out.status
        );
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// A bad file exits 1 and names the key.
#[test]
fn check_config_names_the_bad_key() {
    let (dir, path) = support::scratch_file("mdproxy-cli", "bad.toml");
    std::fs::write(
        &path,
        "[upstream]\ntimeout_ms = 0\n[limits]\nbackground_percent = 101\n",
    )
    .unwrap();
    let out = mdproxy().arg("check-config").arg(&path).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("upstream.timeout_ms"), "{err}");
    assert!(err.contains("limits.background_percent"), "{err}");
    std::fs::write(&path, "[upstream]\ntimeout_ms = \"soon\"\n").unwrap();
    let out = mdproxy().arg("check-config").arg(&path).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8(out.stderr)
            .unwrap()
            .contains("timeout_ms")
    );
    // Fails closed: an empty file names the keys it must have; plain HTTP to a
    // remote upstream is refused.
    std::fs::write(&path, "").unwrap();
    let out = mdproxy().arg("check-config").arg(&path).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("upstream.base_url: missing"), "{err}");
    assert!(err.contains("auth.tokens"), "{err}");
    std::fs::write(
        &path,
        "[auth]\ntokens = [\"t\"]\n[upstream]\nbase_url = \"http://203.0.113.9/api/v1\"\n",
    )
    .unwrap();
    let out = mdproxy().arg("check-config").arg(&path).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8(out.stderr)
            .unwrap()
            .contains("allow_plain_http")
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// Defect: a file with three mistakes took three runs, one error each. One run
/// names them all, one a line with file, line and key, then their number; exit 1.
#[test]
fn check_config_reports_every_problem_in_one_run() {
    let (dir, path) = support::scratch_file("mdproxy-cli-all", "three.toml");
    std::fs::write(
        &path,
        "[server]\nlistn = \"127.0.0.1:8080\"\n\n[auth]\ntokens = [\"t\"]\n\n\
         [upstream]\nbase_url = \"https://api.example.com/api/v1\"\ntoken = \"k\"\n\n\
         [freshness.classes.live]\nsession_fresh_secs = \"3\"\n\n\
         [limits]\nbackground_percent = 101\n",
    )
    .unwrap();
    let out = mdproxy().arg("check-config").arg(&path).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty(), "no TTL table for a refused file");
    let err = String::from_utf8(out.stderr).unwrap();
    let file = path.display();
    assert_eq!(
        err,
        format!(
            "{file}:2: server.listn: unknown key (did you mean server.listen?)\n\
             {file}:12: freshness.classes.live.session_fresh_secs: expected an integer, found a string \"3\"\n\
             {file}:15: limits.background_percent: must be at most 100\n\
             3 problems\n"
        )
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// Defect: with the required keys in the environment (the container pattern),
/// `check-config` passed an empty file and `serve` ran it. A file that sets nothing
/// is refused whatever the environment holds.
#[test]
fn an_empty_file_is_refused_whatever_the_environment_holds() {
    let (dir, path) = support::scratch_file("mdproxy-cli-empty", "empty.toml");
    std::fs::write(&path, "").unwrap();
    let check = |args: &[&str]| {
        with_secrets()
            .env(
                "MDPROXY_UPSTREAM_BASE_URL",
                "https://api.example.com/api/v1",
            )
            .args(args)
            .arg(&path)
            .output()
            .unwrap()
    };
    for args in [&["check-config"][..], &["serve", "--config"]] {
        let out = check(args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert!(
            err.contains(&format!("{}: the file sets no key", path.display())),
            "{err}"
        );
    }
    std::fs::write(&path, "[server]\nlisten = \"127.0.0.1:0\"\n").unwrap();
    let out = check(&["check-config"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// Security review: a TLS private key readable by others passed `check-config`
/// silently. It is accepted with a warning.
#[cfg(unix)]
#[test]
fn check_config_warns_of_a_key_others_may_read() {
    use std::os::unix::fs::PermissionsExt;
    let (dir, path) = support::scratch_file("mdproxy-cli-tls", "tls.toml");
    let pair = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&cert, pair.cert.pem()).unwrap();
    std::fs::write(&key, pair.signing_key.serialize_pem()).unwrap();
    std::fs::write(
        &path,
        format!(
            "[server]\ntls_cert = {:?}\ntls_key = {:?}\n[upstream]\nbase_url = \"https://api.example.com/api/v1\"\n",
            cert.display().to_string(),
            key.display().to_string()
        ),
    )
    .unwrap();
    let run = || {
        with_secrets()
            .arg("check-config")
            .arg(&path)
            .output()
            .unwrap()
    };
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = run();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("warning: server.tls_key:") && err.contains("mode 644"),
        "{err}"
    );
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let out = run();
    assert!(out.status.success());
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A key that is no key: the check reads the files, and names the key.
    std::fs::write(&key, "junk").unwrap();
    let out = run();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("server.tls_key: no PEM private key"), "{err}");
    std::fs::remove_dir_all(&dir).ok();
}

/// Defect: a misspelt variable was silently ignored. `check-config` and `serve`
/// refuse it, naming it and the variable meant; the command line's own variables
/// (`MDPROXY_LOG`) and Kubernetes' service links are not mistakes.
#[test]
fn an_unknown_variable_is_refused_with_a_suggestion() {
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy/mdproxy.toml");
    let out = with_secrets()
        .args(["check-config", example])
        .env("MDPROXY_FRESHNESS_CLASSES_LIVE_FRESH_SECS", "5")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(
        err,
        "MDPROXY_FRESHNESS_CLASSES_LIVE_FRESH_SECS: unknown variable (did you mean \
         MDPROXY_FRESHNESS_CLASSES_LIVE_CLOSED_FRESH_SECS or \
         MDPROXY_FRESHNESS_CLASSES_LIVE_SESSION_FRESH_SECS?)\n1 problem\n"
    );
    // Fails closed: `serve` refuses to start (before it binds anything).
    let out = with_secrets()
        .args(["serve", "--config", example])
        .env("MDPROXY_UPSTREAM_TOKN", "secret")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains(
            "MDPROXY_UPSTREAM_TOKN: unknown variable (did you mean MDPROXY_UPSTREAM_TOKEN?)"
        ),
        "{err}"
    );
    assert!(!err.contains("secret"), "{err}");
    let out = with_secrets()
        .args(["check-config", example])
        .env("MDPROXY_LOG", "warn")
        .env("MDPROXY_SERVICE_HOST", "10.0.0.1")
        .env("MDPROXY_PORT_8080_TCP_ADDR", "10.0.0.1")
        .env("MDPROXY_FRESHNESS_CLASSES_LIVE_SESSION_FRESH_SECS", "5")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `mdproxy serve` reloads its file on SIGHUP: a new token starts working without a
/// restart, and an invalid file is refused while the old one keeps serving.
#[cfg(unix)]
#[tokio::test]
async fn serve_reloads_on_sighup() {
    use std::time::{Duration, Instant};
    let sim = support::sim_with_token("hup-upstream").await;
    let (dir, path) = support::scratch_file("mdproxy-hup", "serve.toml");
    let write = |token: &str| {
        std::fs::write(
            &path,
            format!(
                "[server]\nlisten = \"127.0.0.1:0\"\nreload_poll_ms = 0\n[auth]\ntokens = [\"{token}\"]\n[upstream]\nbase_url = \"{}\"\ntoken = \"hup-upstream\"\n[scheduler]\nenabled = false\n",
                sim.base_url()
            ),
        )
        .unwrap();
    };
    write("first");
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_mdproxy"));
    for name in inherited() {
        child.env_remove(name);
    }
    let mut child = child
        .args(["serve", "--log", "warn", "--config"])
        .arg(&path)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    // Where it listens: its start-up line says (no port is guessed ahead).
    let base = {
        use tokio::io::AsyncBufReadExt;
        let stdout = child.stdout.take().unwrap();
        let mut out = tokio::io::BufReader::new(stdout).lines();
        tokio::time::timeout(Duration::from_secs(20), async {
            while let Ok(Some(line)) = out.next_line().await {
                if let Some(rest) = line.strip_prefix("mdproxy serving ") {
                    return rest.split_whitespace().next().unwrap().to_owned();
                }
            }
            panic!("serve ended before serving");
        })
        .await
        .expect("serve came up")
    };
    // A refused reload changes nothing observable over HTTP (that is the point), so
    // its one outside sign is the error line on stderr.
    let mut serve = support::Watched::new(child);
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let url = format!("{base}/market/indices");
    let status = |token: &'static str| {
        let req = client.get(&url).bearer_auth(token);
        async move { req.send().await.map(|r| r.status().as_u16()).unwrap_or(0) }
    };
    let until = |want: u16, token: &'static str| async move {
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if status(token).await == want {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        false
    };
    assert!(until(200, "first").await, "serve came up");

    std::fs::write(&path, "[server\nbroken").unwrap();
    serve.signal("HUP");
    // Wait (bounded) until the process has dealt with the file, rather than sleeping
    // and hoping it has.
    serve
        .line_where(|line| line.contains("configuration refused"))
        .await;
    assert_eq!(
        status("first").await,
        200,
        "an invalid file keeps the old config"
    );

    write("second");
    serve.signal("HUP");
    assert!(
        until(200, "second").await,
        "the new token works after SIGHUP"
    );
    assert_eq!(status("first").await, 401);
    assert!(
        serve.child.try_wait().unwrap().is_none(),
        "SIGHUP does not stop the process"
    );
    serve.stop().await;
    std::fs::remove_dir_all(&dir).ok();
}

/// A `mdproxy demo --admin-token demo-admin-t --cors-origin http://dash.example:5173`.
async fn admin_demo() -> support::DemoProcess {
    support::DemoProcess::start(&[
        "--admin-token",
        "demo-admin-t",
        "--cors-origin",
        "http://dash.example:5173",
    ])
    .await
}

/// `mdproxy demo --admin-token T --cors-origin O`: the purge answers to T (and the
/// start-up text says how, with T), and a browser at O gets its CORS headers.
#[tokio::test]
async fn demo_takes_an_admin_token_and_cors_origins() {
    let mut demo = admin_demo().await;
    assert!(
        demo.purge_hint.contains("demo-admin-t"),
        "{}",
        demo.purge_hint
    );
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let r = client
        .get(format!("{}/market/indices", demo.base))
        .bearer_auth("demo-token")
        .header("origin", "http://dash.example:5173")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.headers()["access-control-allow-origin"],
        "http://dash.example:5173"
    );
    let purge = |token: &'static str| {
        client
            .post(format!(
                "http://{}/purge?target=/market/indices",
                demo.admin
            ))
            .bearer_auth(token)
            .send()
    };
    assert_eq!(purge("wrong").await.unwrap().status(), 401);
    let ok: serde_json::Value = purge("demo-admin-t").await.unwrap().json().await.unwrap();
    assert_eq!(ok["purged"], 1, "{ok}");
    demo.process.stop().await;
}

/// The demo's purge hint is a curl command that works as printed, in a shell (curl
/// would read `{code}` as a glob without `--globoff`).
#[tokio::test]
#[ignore = "needs curl: scripts/test installs it and runs the ignored tests"]
async fn the_demos_purge_command_works_as_printed() {
    let mut demo = admin_demo().await;
    support::program("curl");
    let printed = demo.purge_hint.strip_prefix("purge: ").unwrap();
    let out = tokio::process::Command::new("sh")
        .args(["-c", printed])
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{printed}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["endpoint"], "/stock/detail/{code}", "{v}");
    demo.process.stop().await;
}
