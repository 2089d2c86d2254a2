//! README stays true: its endpoint table and configuration reference are the ones
//! the code generates, and the example config passes `check-config`.

use std::collections::BTreeMap;

use mdproxy_api::catalog::catalog;
use mdproxy_config::{At, Config};

fn readme() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md")).unwrap()
}

/// README lists exactly the catalogue's endpoints.
#[test]
fn readme_endpoint_table_matches_the_catalogue() {
    assert!(
        readme().contains(&catalog().markdown_table()),
        "README's endpoint table is out of date: regenerate it with `cargo run -- docs`"
    );
}

/// README lists every configuration key with its default and variable.
#[test]
fn readme_configuration_reference_matches_the_code() {
    assert!(
        readme().contains(&mdproxy_core::ops::report::config_reference()),
        "README's configuration table is out of date: regenerate it with `cargo run -- docs`"
    );
}

/// The shipped example configuration is valid with the secrets its header asks for
/// in the environment, and what it sets is what loads (each value checked here
/// differs from the default, so a loader that ignored the file would fail). Without
/// them it is refused, naming exactly the keys the header says are required.
#[test]
fn example_config_is_valid() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy/mdproxy.toml");
    let secrets: BTreeMap<String, String> = [
        ("MDPROXY_AUTH_TOKENS", "3f1d8c0b9e2a7c41,77ab90e1c4d2f365"),
        ("MDPROXY_UPSTREAM_TOKEN", "e0c4a18b5d9f2376"),
        ("MDPROXY_ADMIN_TOKEN", "9b2e4f60a1c7d835"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    let config = mdproxy_config::load(path.as_ref(), &secrets, &[]).unwrap();
    let default = Config::default();
    assert_eq!(config.auth.tokens.len(), 2);
    assert_eq!(
        config.upstream.base_url,
        "https://market-data.example.com/api/v1"
    );
    assert_ne!(config.upstream.base_url, default.upstream.base_url);
    assert_eq!(
        config.admin.listen, "127.0.0.1:9091",
        "the status page and metrics are on"
    );
    assert_ne!(config.admin.listen, default.admin.listen);
    let job = &config.scheduler.jobs[0];
    assert_eq!(job.name, "watchlist-klines");
    assert_eq!(job.targets.len(), 2);
    assert!(default.scheduler.jobs.iter().all(|j| j.name != job.name));
    assert_eq!(
        config.upstream.endpoint_timeouts_ms["/stock/financial/statements/{code}"],
        30_000
    );

    let refused = mdproxy_config::load(path.as_ref(), &BTreeMap::new(), &[]).unwrap_err();
    let mut keys: Vec<&str> = refused
        .list
        .iter()
        .map(|p| p.key.as_deref().unwrap_or_default())
        .collect();
    keys.sort_unstable();
    assert_eq!(keys, ["auth.tokens", "upstream.token"], "{refused}");
    assert!(
        refused.list.iter().all(|p| matches!(p.at, At::Line(_))),
        "each points to its table in the file: {refused}"
    );
}

/// README shows the default TTL of every endpoint as `check-config` prints it.
#[test]
fn readme_ttl_table_matches_the_defaults() {
    let table = mdproxy_core::ops::report::ttl_table(&Config::default());
    assert!(
        readme().contains(&table),
        "README's TTL table is out of date: regenerate it with `cargo run -- docs`"
    );
}

/// Every Markdown file README or a source comment names is in the repository
/// (README once pointed to a DOMAIN.md that was not).
#[test]
fn every_document_named_exists() {
    let root = std::path::Path::new(crate::support::ROOT);
    let mut texts = vec![std::fs::read_to_string(root.join("README.md")).unwrap()];
    let mut dirs: Vec<_> = std::fs::read_dir(root.join("crates"))
        .unwrap()
        .map(|crate_dir| crate_dir.unwrap().path().join("src"))
        .collect();
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                texts.push(std::fs::read_to_string(path).unwrap());
            }
        }
    }
    let mut named = std::collections::BTreeSet::new();
    for text in &texts {
        for word in text.split(|c: char| !(c.is_ascii_alphanumeric() || "/._-".contains(c))) {
            if word.ends_with(".md") && word.len() > 3 {
                // `../../README.md` in a crate's code names the repository's file.
                named.insert(word.trim_start_matches(['.', '/']).to_owned());
            }
        }
    }
    assert!(named.contains("docs/DOMAIN.md"), "{named:?}");
    for name in &named {
        assert!(
            root.join(name).is_file(),
            "{name} is named but not in the repository"
        );
    }
}
