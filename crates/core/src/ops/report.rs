//! Operator-facing tables derived from the catalogue and a config: the effective TTL
//! per endpoint (`mdproxy check-config`) and the manual's tables.

use std::fmt::Write;

use crate::cache::freshness::Policy;
use mdproxy_api::catalog::{FreshnessClass, catalog};
use mdproxy_config::Config;

/// The effective TTLs of every endpoint under `config`, in and out of session, one
/// line per endpoint and class, with its upstream timeout (`mdproxy check-config`).
pub fn ttl_table(config: &Config) -> String {
    let policy = Policy::new(config, 0);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<46} {:<10} {:>9} {:>9} {:>12} {:>9} {:>9} {:>8}",
        "endpoint",
        "class",
        "in:fresh",
        "in:stale",
        "out:fresh",
        "out:stale",
        "if-error",
        "timeout"
    );
    // The stream is never cached.
    for e in catalog().endpoints().iter().filter(|e| !e.streaming) {
        for class in e.classes() {
            let ttl = policy.ttl(e.id, class);
            // A final answer is never held to the open (freshness.rs).
            let until_open = class != FreshnessClass::Immutable
                && policy.until_open(e.id, class, e.until_open_when.is_some());
            let out_fresh = if until_open {
                format!("≤open+{}", config.freshness.open_grace_secs)
            } else {
                human(ttl.closed_fresh_secs)
            };
            let _ = writeln!(
                out,
                "{:<46} {:<10} {:>9} {:>9} {:>12} {:>9} {:>9} {:>8}",
                e.path,
                class.as_str(),
                human(ttl.session_fresh_secs),
                human(ttl.session_stale_secs),
                out_fresh,
                human(ttl.closed_stale_secs),
                human(ttl.error_secs),
                human_ms(config.upstream.timeout_for(e).as_millis())
            );
        }
    }
    out
}

/// `1500` → `1500ms`, `90000` → `90s` (whole seconds as [`human`] writes them).
fn human_ms(ms: u128) -> String {
    if ms.is_multiple_of(1_000) {
        human(u64::try_from(ms / 1_000).unwrap_or(u64::MAX))
    } else {
        format!("{ms}ms")
    }
}

/// `90` → `90s`, `3600` → `1h`, `86400` → `1d`.
fn human(secs: u64) -> String {
    match secs {
        s if s >= 86_400 && s % 86_400 == 0 => format!("{}d", s / 86_400),
        s if s >= 3_600 && s % 3_600 == 0 => format!("{}h", s / 3_600),
        s if s >= 60 && s % 60 == 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

/// Every configuration key with its default and environment variable, as Markdown
/// (docs/configuration.md's reference is checked against this by a test).
pub fn config_reference() -> String {
    let mut out = String::from("| Key | Default | Environment variable |\n|---|---|---|\n");
    for key in mdproxy_config::env_keys() {
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
