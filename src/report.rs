//! Operator-facing tables derived from the catalogue and a config: the effective TTL
//! per endpoint (`mdproxy check-config`) and README's endpoint list.

use std::fmt::Write;

use crate::catalog::catalog;
use crate::config::Config;
use crate::freshness::Policy;

/// The effective TTL of every endpoint under `config`, one line each.
pub fn ttl_table(config: &Config) -> String {
    let policy = Policy::new(config);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<48} {:<10} {:>10} {:>10}",
        "endpoint", "class", "fresh_s", "stale_s"
    );
    for e in catalog().endpoints() {
        let mut classes = vec![e.class];
        if let Some((_, other)) = e.class_when_present {
            classes.push(other);
        }
        for class in classes {
            let ttl = policy.ttl(e.id, class);
            let _ = writeln!(
                out,
                "{:<48} {:<10} {:>10} {:>10}",
                e.path,
                class.as_str(),
                ttl.fresh_secs,
                ttl.stale_secs
            );
        }
    }
    out
}

/// Every configuration key with its default and environment variable, as Markdown
/// (README's configuration reference is checked against this by a test).
pub fn config_reference() -> String {
    let mut out = String::from("| Key | Default | Environment variable |\n|---|---|---|\n");
    for key in crate::config::env_keys() {
        let _ = writeln!(
            out,
            "| `{}` | `{}` | `{}` |",
            key.path.join("."),
            key.default,
            key.var
        );
    }
    out
}
