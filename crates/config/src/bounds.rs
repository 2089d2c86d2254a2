//! The upper bound of every numeric key: what the code holds without overflow and
//! what is sane to run with. A key of its own kind has its own bound (a
//! `Retry-After` honoured for at most a day, a percentage at most 100); every other
//! key has its kind's (a duration in ms at most a day, in seconds at most a year, a
//! count at most a billion). Read off the configuration as a table, so that a key
//! added later is bounded from its first day.

use super::Config;
use super::problem::Problem;

/// The largest `cache.disk_bytes`: past a few hundred GiB the engine's index and
/// its open files outgrow what a node gives it, and from 1 TiB foyer 0.22 fails at
/// start.
pub const MAX_DISK_BYTES: u64 = 256 << 30;

/// Keys with a bound of their own, and why.
const OWN: &[(&str, u64)] = &[
    // A 429 or 503 pauses the upstream for what it says, up to this: a day, not
    // the 56 years a huge value allowed.
    ("limits.retry_after_max_secs", 86_400),
    ("limits.retry_after_default_secs", 86_400),
    // Memory: a TiB is past any node's.
    ("cache.max_bytes", 1 << 40),
    ("cache.disk_bytes", MAX_DISK_BYTES),
    // Redis holds a value of at most 512 MiB.
    ("cluster.max_l2_body_bytes", 512 << 20),
    // A fleet's nodes: the heartbeat's sorted set counts any number, but a
    // budget split in more than ten thousand is no budget.
    ("cluster.expected_nodes", 10_000),
    ("upstream.max_body_bytes", 1 << 30),
    ("passthrough.max_target_bytes", 65_536),
    ("server.max_header_bytes", 1 << 20),
    ("server.max_headers", 10_000),
    // HTTP/2's SETTINGS_MAX_CONCURRENT_STREAMS is a u32; more than this is no
    // limit a client would notice.
    ("server.h2_max_streams", 65_536),
    ("server.max_connections", 1_000_000),
    // Serving threads: past the cores of any machine, each a thread and a runtime.
    ("server.threads", 1_024),
    ("hub.max_streams", 1_000_000),
    ("hub.max_streams_per_token", 1_000_000),
    // The catalogue's codes per request.
    ("hub.max_codes_per_stream", 500),
    ("hub.batch_size", 500),
    ("upstream.breaker_failures", 1_000_000),
    ("upstream.pool_max_idle_per_host", 100_000),
];

/// The bound of a duration in milliseconds: a day.
const MAX_MS: u64 = 86_400_000;
/// The bound of a duration in seconds: a year.
const MAX_SECS: u64 = 365 * 86_400;
/// The bound of a percentage.
const MAX_PERCENT: u64 = 100;
/// The bound of any other count, size or rate: a billion.
const MAX_COUNT: u64 = 1_000_000_000;

/// The bound of the key `dotted`.
pub fn bound(dotted: &str) -> u64 {
    if let Some((_, own)) = OWN.iter().find(|(key, _)| *key == dotted) {
        return *own;
    }
    // An endpoint's entry (`upstream.endpoint_timeouts_ms."/stock/kline"`) is of
    // its table's kind.
    let named = match dotted.rfind(".\"") {
        Some(at) if dotted.ends_with('"') => &dotted[..at],
        _ => dotted,
    };
    let last = named.rsplit('.').next().unwrap_or(named);
    if last.ends_with("_ms") {
        MAX_MS
    } else if last.ends_with("_secs") {
        MAX_SECS
    } else if last.ends_with("_percent") {
        MAX_PERCENT
    } else {
        MAX_COUNT
    }
}

impl Config {
    /// Every numeric key past its bound, each with the bound.
    pub(super) fn bound_problems(&self, problems: &mut Vec<Problem>) {
        let Ok(table) = toml::Table::try_from(self) else {
            return;
        };
        walk(&table, "", problems);
    }
}

fn walk(table: &toml::Table, prefix: &str, problems: &mut Vec<Problem>) {
    for (key, value) in table {
        let dotted = if prefix.is_empty() {
            key.clone()
        } else if key.contains(['.', '/']) {
            // An endpoint's override: `freshness.endpoints."/stock/kline"`.
            format!("{prefix}.\"{key}\"")
        } else {
            format!("{prefix}.{key}")
        };
        match value {
            toml::Value::Integer(n) => {
                let max = bound(&dotted);
                if u64::try_from(*n).is_ok_and(|n| n > max) {
                    problems.push(Problem::new(&dotted, format!("must be at most {max}")));
                }
            }
            toml::Value::Table(inner) => walk(inner, &dotted, problems),
            // List entries (`upstream.fallback[0].upstream_per_day`), each of its
            // key's kind.
            toml::Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    if let toml::Value::Table(inner) = item {
                        walk(inner, &format!("{dotted}[{i}]"), problems);
                    }
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every key has a bound: its own, or its kind's.
    #[test]
    fn every_key_has_a_bound() {
        assert_eq!(bound("limits.retry_after_max_secs"), 86_400);
        assert_eq!(bound("upstream.timeout_ms"), MAX_MS);
        assert_eq!(bound("freshness.classes.live.error_secs"), MAX_SECS);
        assert_eq!(bound("limits.background_percent"), 100);
        assert_eq!(bound("limits.upstream_rps"), MAX_COUNT);
        assert_eq!(
            bound("upstream.endpoint_timeouts_ms.\"/stock/kline\""),
            MAX_MS,
            "an endpoint's entry is of its table's kind"
        );
        assert_eq!(
            bound("freshness.endpoints.\"/stock/kline\".fresh_secs"),
            MAX_SECS
        );
        let mut config = Config::default();
        config.limits.retry_after_max_secs = 1 << 40;
        config.upstream.timeout_ms = MAX_MS;
        let mut problems = Vec::new();
        config.bound_problems(&mut problems);
        assert_eq!(problems.len(), 1, "{problems:?}");
        let said = super::super::Problems::new("file", problems).to_string();
        assert!(
            said.contains("file: limits.retry_after_max_secs: must be at most 86400"),
            "{said}"
        );
    }

    /// Defect: list entries were never walked, so a fallback's quota or rate had
    /// no bound (a `upstream_per_day` near 1e18 overflowed the reserve's sum), and
    /// an endpoint's timeout was bounded as a count, not as milliseconds.
    #[test]
    fn list_entries_and_endpoint_entries_are_bounded() {
        let mut config = Config::default();
        config.upstream.fallback.push(crate::FallbackConfig {
            base_url: "https://mirror.example.com/api/v1".into(),
            token: crate::Secret::new("k2"),
            upstream_rps: Some(5),
            upstream_burst: None,
            upstream_per_minute: None,
            upstream_per_day: Some(1 << 60),
        });
        config
            .upstream
            .endpoint_timeouts_ms
            .insert("/stock/kline".into(), MAX_MS + 1);
        let mut problems = Vec::new();
        config.bound_problems(&mut problems);
        let keys: Vec<_> = problems.iter().filter_map(|p| p.key.clone()).collect();
        assert!(
            keys.contains(&"upstream.fallback[0].upstream_per_day".to_owned()),
            "{keys:?}"
        );
        assert!(
            keys.contains(&"upstream.endpoint_timeouts_ms.\"/stock/kline\"".to_owned()),
            "{keys:?}"
        );
        assert_eq!(keys.len(), 2, "{keys:?}");
    }
}
