//! The access log: one line per answered request (target `access`), and whether
//! it is written at all.

/// One request as the access log tells it.
pub(crate) struct AccessLine<'a> {
    pub(crate) method: &'a str,
    pub(crate) path: &'a str,
    pub(crate) endpoint: &'a str,
    pub(crate) key: &'a str,
    pub(crate) status: u16,
    pub(crate) code: &'a str,
    pub(crate) cache: &'a str,
    pub(crate) bytes: Option<u64>,
    pub(crate) micros: u64,
    pub(crate) client: &'a str,
    pub(crate) peer: std::net::SocketAddr,
    pub(crate) request_id: &'a str,
    pub(crate) trace_id: &'a str,
}

/// Writes the access-log line (target `access`, level `info`, `warn` for a 5xx);
/// never the token, never the query as sent (the key is the canonical one, without
/// credentials).
pub(crate) fn access_line(line: &AccessLine<'_>) {
    macro_rules! line {
        ($level:ident) => {
            tracing::$level!(
        target: "access",
        method = line.method,
        path = line.path,
        endpoint = line.endpoint,
        key = line.key,
        status = line.status,
        code = line.code,
        cache = line.cache,
        bytes = line.bytes,
        duration_ms = line.micros as f64 / 1000.0,
        client = line.client,
        peer = %line.peer,
        request_id = line.request_id,
        trace_id = line.trace_id,
            )
        };
    }
    if line.status >= 500 {
        line!(warn);
    } else {
        line!(info);
    }
}

/// Whether the access log writes the line of an answer with `status`: the level
/// [`access_line`] gives it is enabled (a filter check, one load when it is off).
pub(crate) fn access_enabled(status: u16) -> bool {
    if status >= 500 {
        tracing::enabled!(target: "access", tracing::Level::WARN)
    } else {
        tracing::enabled!(target: "access", tracing::Level::INFO)
    }
}
