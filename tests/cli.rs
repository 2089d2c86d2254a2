//! The command line: `check-config` accepts the example file, prints the TTL table,
//! and refuses a bad file with exit 1 and a message naming the key.

use std::process::Command;

fn mdproxy() -> Command {
    Command::new(env!("CARGO_BIN_EXE_mdproxy"))
}

/// The example configuration passes and the effective TTLs are printed.
#[test]
fn check_config_prints_the_ttl_table() {
    let out = mdproxy()
        .args([
            "check-config",
            concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/mdproxy.toml"),
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
    assert_eq!(
        text.lines().filter(|l| l.starts_with('/')).count(),
        73,
        "72 endpoints, the feed twice"
    );
}

/// A bad file exits 1 and names the key.
#[test]
fn check_config_names_the_bad_key() {
    let dir = std::env::temp_dir().join(format!("mdproxy-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("bad.toml");
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
    std::fs::remove_dir_all(&dir).ok();
}
