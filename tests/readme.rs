//! README stays true: its endpoint table and configuration reference are the ones
//! the code generates, and the example config passes `check-config`.

use mdproxy::api::catalog::catalog;
use mdproxy::config::Config;

fn readme() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap()
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
        readme().contains(&mdproxy::ops::report::config_reference()),
        "README's configuration table is out of date: regenerate it with `cargo run -- docs`"
    );
}

/// The shipped example configuration is valid, and what it sets is what loads (each
/// value checked here differs from the default, so a loader that ignored the file
/// would fail).
#[test]
fn example_config_is_valid() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/mdproxy.toml");
    let config = Config::load(path.as_ref(), |_| None).unwrap();
    let default = Config::default();
    let tokens: Vec<&str> = config.auth.tokens.iter().map(|t| t.expose()).collect();
    assert_eq!(tokens, ["change-me"]);
    assert_ne!(config.auth.tokens, default.auth.tokens);
    assert_eq!(
        config.upstream.base_url,
        "https://market-data.example.com/api/v1"
    );
    assert_ne!(config.upstream.base_url, default.upstream.base_url);
    let client = &config.auth.clients[0];
    assert_eq!(
        (client.name.as_str(), client.rps, client.burst),
        ("dashboard", Some(50), Some(100))
    );
    assert!(default.auth.clients.is_empty());
    let job = &config.scheduler.jobs[0];
    assert_eq!(job.name, "watchlist-klines");
    assert_eq!(job.targets.len(), 2);
    assert!(default.scheduler.jobs.iter().all(|j| j.name != job.name));
}

/// README shows the default TTL of every endpoint as `check-config` prints it.
#[test]
fn readme_ttl_table_matches_the_defaults() {
    let table = mdproxy::ops::report::ttl_table(&Config::default());
    assert!(
        readme().contains(&table),
        "README's TTL table is out of date: regenerate it with `cargo run -- docs`"
    );
}

/// Every Markdown file README or a source comment names is in the repository
/// (README once pointed to a DOMAIN.md that was not).
#[test]
fn every_document_named_exists() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut texts = vec![std::fs::read_to_string(root.join("README.md")).unwrap()];
    let mut dirs = vec![root.join("src")];
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
                named.insert(word.trim_start_matches("./").to_owned());
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
