//! Settings that cannot hurt: every numeric key of the configuration, set to 0, 1,
//! its bound and an absurd value (TOML's largest, or its type's), is either refused by the checks `check-config`
//! runs (naming the key) or accepted, and then `serve` starts with it and stops;
//! the two never disagree, nothing panics, and an absurd value is always refused.

use crate::support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use mdproxy_config::{Config, Problems};
use mdproxy_market::Clock;
use toml::Value;

/// What TOML can hold, far past any sane setting.
const ABSURD: i64 = i64::MAX;
/// The largest a key of 32 bits holds: TOML's largest is refused by its type.
const ABSURD_U32: i64 = u32::MAX as i64;

/// A configuration file in front of `sim` with a disk tier in `dir` and the admin
/// listener on, as a TOML table every case changes one key of.
fn base(sim: &mdproxy_sim::SimHandle, dir: &Path) -> toml::Table {
    let text = format!(
        r#"
[server]
listen = "127.0.0.1:0"
[auth]
tokens = ["{token}"]
[upstream]
base_url = "{base}"
token = "{upstream}"
probe_target = ""
[scheduler]
enabled = false
[cache]
disk_path = "{dir}"
disk_bytes = 16777216
[admin]
listen = "127.0.0.1:0"
token = "admin-secret"
"#,
        token = support::TOKEN,
        base = sim.base_url(),
        upstream = support::UPSTREAM_TOKEN,
        dir = dir.display(),
    );
    text.parse().expect("the base file is TOML")
}

/// A key: its path of table names, as the refusals write it (`a.b`, an endpoint's
/// override quoted: `freshness.endpoints."/stock/kline".fresh_secs`).
#[derive(Debug, Clone)]
struct Key(Vec<String>);

impl std::fmt::Display for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, part) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(".")?;
            }
            if part.contains(['.', '/']) {
                write!(f, "\"{part}\"")?;
            } else {
                f.write_str(part)?;
            }
        }
        Ok(())
    }
}

/// Every integer key of the configuration (`limits.retry_after_max_secs`,
/// `freshness.classes.live.session_fresh_secs`), read off the defaults.
fn integer_keys() -> Vec<Key> {
    fn walk(table: &toml::Table, prefix: &[String], out: &mut Vec<Key>) {
        for (key, value) in table {
            let mut path = prefix.to_vec();
            path.push(key.clone());
            match value {
                Value::Integer(_) => out.push(Key(path)),
                Value::Table(inner) => walk(inner, &path, out),
                _ => {}
            }
        }
    }
    let defaults = toml::Table::try_from(Config::default()).expect("the defaults serialise");
    let mut keys = Vec::new();
    walk(&defaults, &[], &mut keys);
    keys
}

/// `table` with `key` set to `value` (the tables on the way made as needed).
fn with(mut table: toml::Table, key: &Key, value: i64) -> toml::Table {
    let (last, parts) = key.0.split_last().expect("a key");
    let mut at = &mut table;
    for part in parts {
        at = at
            .entry(part.as_str())
            .or_insert_with(|| Value::Table(toml::Table::new()))
            .as_table_mut()
            .expect("a table on the way");
    }
    at.insert(last.clone(), Value::Integer(value));
    table
}

/// What `check-config` says of `text`: the checks `serve` runs at start, the same.
fn check_config(text: &str) -> Result<Config, Problems> {
    let checks = [
        mdproxy_core::ops::reload::CHECKS,
        &[mdproxy_core::edge::tls::check],
    ]
    .concat();
    mdproxy_config::from_text(text, "sweep.toml", &BTreeMap::new(), &checks)
}

/// The bound a refusal states for `key` (`key: must be at most 86400`), if any.
fn stated_bound(problems: &str, key: &Key) -> Option<i64> {
    problems
        .lines()
        .filter(|line| line.contains(&format!("{key}: ")))
        .find_map(|line| {
            let at = line.find("at most ")? + "at most ".len();
            let digits: String = line[at..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            digits.parse().ok()
        })
}

/// One case: the file with `key` = `value` is refused by `check-config`, or
/// accepted and served; `Err` says how they disagreed.
async fn case(
    base: &toml::Table,
    key: &Key,
    value: i64,
    clock: &Arc<dyn Clock>,
    dir: &Path,
) -> Result<Option<String>, String> {
    let text = toml::to_string(&with(base.clone(), key, value)).unwrap();
    let config = match check_config(&text) {
        Err(problems) => {
            let said = problems.to_string();
            if !said.contains(key.0.last().expect("a key").as_str()) {
                return Err(format!(
                    "{key} = {value}: refused without naming it: {said}"
                ));
            }
            return Ok(Some(said));
        }
        Ok(config) => config,
    };
    let started = tokio::time::timeout(
        std::time::Duration::from_secs(30),
        mdproxy_core::app::start(&config, clock.clone()),
    )
    .await
    .map_err(|_| format!("{key} = {value}: check-config OK, serve did not start in 30 s"))?;
    match started {
        Ok(app) => {
            app.shutdown().await;
            let _ = std::fs::remove_dir_all(dir);
            Ok(None)
        }
        Err(e) => Err(format!(
            "{key} = {value}: check-config OK, serve refused: {e}"
        )),
    }
}

/// Every integer key at 0, 1, its bound and an absurd value: `check-config` and an
/// in-process `serve` agree, nothing panics, and the absurd value is refused with
/// the bound, which is itself accepted (or refused only for another key's sake).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_numeric_setting_is_bounded_and_check_config_agrees_with_serve() {
    let sim = mdproxy_sim::start(&support::sim_config(), support::saturday())
        .await
        .unwrap();
    let clock: Arc<dyn Clock> = support::saturday();
    let dir: PathBuf = Path::new(env!("CARGO_TARGET_TMPDIR")).join("settings-sweep");
    let _ = std::fs::remove_dir_all(&dir);
    let base = base(&sim, &dir);
    let keys = integer_keys();
    assert!(keys.len() > 60, "{keys:?}");
    let mut faults = Vec::new();
    for key in &keys {
        for value in [0, 1] {
            if let Err(fault) = case(&base, key, value, &clock, &dir).await {
                faults.push(fault);
            }
        }
        let mut absurd = case(&base, key, ABSURD, &clock, &dir).await;
        if matches!(&absurd, Ok(Some(said)) if stated_bound(said, key).is_none()) {
            // Refused as too large for its type (`expected u32`): the type's
            // largest value is then refused with the bound.
            absurd = case(&base, key, ABSURD_U32, &clock, &dir).await;
        }
        match absurd {
            Err(fault) => faults.push(fault),
            Ok(None) => faults.push(format!("{key}: an absurd value accepted, no bound")),
            Ok(Some(said)) => match stated_bound(&said, key) {
                None => faults.push(format!(
                    "{key}: an absurd value refused, no bound stated: {said}"
                )),
                Some(bound) => match case(&base, key, bound, &clock, &dir).await {
                    Err(fault) => faults.push(fault),
                    Ok(Some(said)) if stated_bound(&said, key) == Some(bound) => {
                        faults.push(format!("{key} = {bound}: its own bound refused: {said}"));
                    }
                    Ok(_) => {}
                },
            },
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        faults.is_empty(),
        "{} faults:\n{}",
        faults.len(),
        faults.join("\n")
    );
}
