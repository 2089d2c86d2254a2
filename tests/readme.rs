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

/// The shipped example configuration is valid.
#[test]
fn example_config_is_valid() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/mdproxy.toml");
    let config = Config::load(path.as_ref(), |_| None).unwrap();
    assert_eq!(
        config.freshness.classes[&mdproxy::api::catalog::FreshnessClass::Live].session_fresh_secs,
        3
    );
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
