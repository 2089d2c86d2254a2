//! What a reload cannot apply: the keys whose new values take effect only at the
//! next start (listeners, connection limits, the cache's sizes, the fleet, the
//! scheduler, traces). A reload applies the rest and names these.

use super::{Config, ServerConfig};

impl Config {
    /// The keys (or groups of keys) that differ between this running configuration
    /// and `next` and that only a restart applies, in a stable order.
    pub fn restart_only_changes(&self, next: &Config) -> Vec<&'static str> {
        let (old, new) = (self, next);
        let connections = |s: &ServerConfig| {
            (
                s.max_connections,
                s.max_connections_per_client_percent,
                s.header_read_timeout_ms,
                s.send_timeout_ms,
                s.keep_alive,
                s.max_headers,
                s.max_header_bytes,
                s.bare_http1,
                s.h2_max_streams,
                s.h2_ping_secs,
            )
        };
        let disk = |c: &Config| (c.cache.disk_path.clone(), c.cache.disk_bytes);
        [
            (new.server.listen != old.server.listen, "server.listen"),
            (
                connections(&new.server) != connections(&old.server),
                "server connection limits",
            ),
            (
                new.server.tls_cert.is_empty() != old.server.tls_cert.is_empty(),
                "server.tls_cert (TLS on or off)",
            ),
            (
                new.server.reload_poll_ms != old.server.reload_poll_ms,
                "server.reload_poll_ms",
            ),
            // The listener's drain keeps the grace it started with.
            (
                new.server.shutdown_grace_ms != old.server.shutdown_grace_ms,
                "server.shutdown_grace_ms",
            ),
            (
                (new.server.threads, new.server.work_stealing)
                    != (old.server.threads, old.server.work_stealing),
                "server.threads, server.work_stealing",
            ),
            (new.log.format != old.log.format, "log.format"),
            (new.admin.listen != old.admin.listen, "admin.listen"),
            (
                new.cache.max_bytes != old.cache.max_bytes,
                "cache.max_bytes",
            ),
            (disk(new) != disk(old), "cache.disk_path, cache.disk_bytes"),
            (new.cluster != old.cluster, "cluster"),
            (new.mcp != old.mcp, "mcp"),
            (new.scheduler != old.scheduler, "scheduler"),
            (new.telemetry != old.telemetry, "telemetry"),
        ]
        .into_iter()
        .filter_map(|(changed, key)| changed.then_some(key))
        .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each restart-only key is named when it alone changes; a reloadable key (a
    /// freshness TTL, the upstream's URL) is not.
    #[test]
    fn only_what_a_restart_applies_is_named() {
        let old = Config::default();
        let changed = |edit: fn(&mut Config)| {
            let mut new = old.clone();
            edit(&mut new);
            old.restart_only_changes(&new)
        };
        assert!(changed(|_| {}).is_empty());
        assert_eq!(
            changed(|c| c.server.listen = "0.0.0.0:1".into()),
            ["server.listen"]
        );
        assert_eq!(
            changed(|c| c.server.max_headers += 1),
            ["server connection limits"]
        );
        assert_eq!(
            changed(|c| c.server.tls_cert = "cert.pem".into()),
            ["server.tls_cert (TLS on or off)"]
        );
        assert_eq!(changed(|c| c.cache.max_bytes += 1), ["cache.max_bytes"]);
        assert_eq!(
            changed(|c| c.cache.disk_bytes += 1),
            ["cache.disk_path, cache.disk_bytes"]
        );
        assert_eq!(
            changed(|c| c.scheduler.enabled = !c.scheduler.enabled),
            ["scheduler"]
        );
        // Read once at start: the config's poll, the listener's drain, the
        // log's format (a reload said nothing of them, and they did not apply).
        assert_eq!(
            changed(|c| c.server.reload_poll_ms += 1),
            ["server.reload_poll_ms"]
        );
        assert_eq!(
            changed(|c| c.server.shutdown_grace_ms += 1),
            ["server.shutdown_grace_ms"]
        );
        assert_eq!(
            changed(|c| c.server.work_stealing = !c.server.work_stealing),
            ["server.threads, server.work_stealing"]
        );
        assert!(changed(|c| c.log.access = !c.log.access).is_empty());
        assert!(changed(|c| c.upstream.base_url = "http://elsewhere/api/v1".into()).is_empty());
        assert!(changed(|c| c.limits.upstream_rps += 1).is_empty());
    }
}
