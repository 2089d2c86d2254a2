//! The wire to the upstream: one GET sent and its answer read whole, within the body
//! limit. Direct connections are HTTP/1.1 over rustls (hyper-rustls's connector),
//! kept in a pool of mdproxy's own (`pool.rs`); the request using a connection
//! writes its head and reads the answer on its own task (`exchange.rs`, httparse
//! for the head): no connection task, no channels, no per-request URL parse, the
//! body read straight into a buffer of its size (hyper's client connection cost a
//! miss about a sixth of its instructions: docs/BENCHMARKS.md, "Instructions per
//! miss"). When the environment names a proxy for the upstream (`HTTPS_PROXY`,
//! `HTTP_PROXY`, `ALL_PROXY`, minus `NO_PROXY`), reqwest carries the request, as it
//! always did. What an answer means is decided by the client (`client.rs`), which
//! this module does not know.

use std::borrow::Cow;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode, Uri, Version};
use http_body_util::BodyExt;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::proxy::matcher::Matcher;
use rustls::RootCertStore;

use pool::Pool;

/// How long an idle pooled connection is kept.
const POOL_IDLE: Duration = Duration::from_secs(60);
/// TCP keepalive: idle time before the first probe, and between probes (three).
const KEEPALIVE: Duration = Duration::from_secs(15);
/// How long sent data may go unacknowledged before the kernel drops the connection.
#[cfg(target_os = "linux")]
const USER_TIMEOUT: Duration = Duration::from_secs(30);

/// The connection settings a transport is built from.
#[derive(Clone, Copy, Debug)]
pub struct Settings {
    /// The connect timeout, TCP and TLS handshake together; a connect that takes
    /// longer is a [`WireError::Timeout`].
    pub connect_timeout: Duration,
    /// Idle connections kept per host.
    pub pool_max_idle_per_host: usize,
}

/// Why nothing (or nothing whole) came back.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// The connect took longer than its timeout (or the OS gave up on it).
    #[error("the upstream did not answer in time")]
    Timeout,
    /// Refused, reset, DNS failure, a TLS failure, a body broken off.
    #[error("the upstream is unreachable")]
    Unreachable,
    /// The body announced or ran past `limit` bytes; reading stopped there.
    #[error("the upstream's answer is too large")]
    TooLarge { limit: u64 },
}

/// Why a transport could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// reqwest refused its settings (the proxied path).
    #[error("cannot build the upstream client: {0}")]
    Reqwest(#[source] reqwest::Error),
    /// rustls refused its protocol versions.
    #[error("cannot set up TLS toward the upstream: {0}")]
    Tls(#[source] rustls::Error),
    /// A proxy variable of the environment would be ignored (the value is not
    /// shown: it may hold a password).
    #[error(
        "the environment's {variable} {why}: refusing to send the upstream's requests direct (fix or unset it)"
    )]
    Proxy {
        variable: &'static str,
        why: &'static str,
    },
}

/// An answer read whole.
#[derive(Debug)]
pub struct Received {
    pub status: StatusCode,
    pub retry_after: Option<HeaderValue>,
    /// The answer's `Date`, with a `Retry-After` only: the upstream's clock, which
    /// a `Retry-After` date is read against.
    pub date: Option<HeaderValue>,
    pub body: Bytes,
    /// The body had no length and no chunked framing, so it ended where the
    /// connection did: a cut is seen only by its JSON not closing.
    pub close_delimited: bool,
}

type Connector = Bounded<HttpsConnector<HttpConnector>>;

/// The pooled connections toward one upstream instance.
#[allow(
    clippy::large_enum_variant,
    reason = "one per upstream instance, built once; a box would cost every request a hop"
)]
pub enum Transport {
    Direct(Pool),
    Proxied(reqwest::Client),
}

impl Transport {
    /// The transport for `base`: reqwest when the environment's proxy settings
    /// intercept it (reqwest reads the same ones), else the direct client trusting
    /// the webpki roots.
    ///
    /// # Errors
    /// When TLS or reqwest cannot be set up.
    pub fn new(base: &str, settings: Settings) -> Result<Transport, BuildError> {
        if let Some((variable, why)) = unusable_proxy_var(|name| std::env::var(name).ok()) {
            return Err(BuildError::Proxy { variable, why });
        }
        if wants_proxy(&Matcher::from_system(), base) {
            tracing::info!("the upstream is reached through the environment's proxy");
            return proxied_client(settings, None).map(Transport::Proxied);
        }
        let roots = RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        };
        direct(settings, roots).map(Transport::Direct)
    }

    /// Whether requests go through a proxy.
    #[cfg(test)]
    fn is_proxied(&self) -> bool {
        matches!(self, Transport::Proxied(_))
    }

    /// GETs `address` with the `common` headers and the request's `own` (`Host`
    /// from the URL when they carry none), reading at most `limit` bytes of body.
    /// No whole-request timeout here: the caller bounds the whole exchange.
    ///
    /// # Errors
    /// A [`WireError`] when no whole answer came back.
    pub async fn get<'a>(
        &self,
        address: impl Into<Address<'a>>,
        common: &CommonHeaders,
        own: &[Own],
        limit: u64,
    ) -> Result<Received, WireError> {
        let address = address.into();
        // Boxed, both: an exchange's state would otherwise be moved with the
        // fill's future (reqwest's the larger), and copied each time it is.
        match self {
            Transport::Direct(pool) => {
                Box::pin(direct_get(pool, address, common, own, limit)).await
            }
            Transport::Proxied(client) => {
                Box::pin(proxied_get(client, address, common, own, limit)).await
            }
        }
    }
}

/// [`Transport::get`] through reqwest (a proxy the environment names).
async fn proxied_get(
    client: &reqwest::Client,
    address: Address<'_>,
    common: &CommonHeaders,
    own: &[Own],
    limit: u64,
) -> Result<Received, WireError> {
    let response = client.get(&*address.url()).headers(common.with(own)).send();
    let response = response.await.map_err(|e| wire_error(&e))?;
    read(http::Response::from(response), limit).await
}

/// Where a GET goes: a URL, or the upstream's base URL and a target that follows
/// its path. The direct path writes the two into the request line as they are; the
/// whole URL is made only where one is needed (a new connection, reqwest), so a
/// miss on a kept connection neither joins nor splits a URL.
#[derive(Clone, Copy, Debug)]
pub struct Address<'a> {
    base: &'a str,
    target: &'a str,
}

impl<'a> Address<'a> {
    /// `target` (a path from `/`, and its query) after `base`'s path. `base` is a
    /// URL with no query, no fragment and no trailing slash: the caller's to hold.
    pub fn joined(base: &'a str, target: &'a str) -> Address<'a> {
        Address { base, target }
    }

    /// The authority, and the request target in two parts (as [`split_url`] splits
    /// the whole URL: the two joined are its target).
    fn split(&self) -> Option<(&'a str, Cow<'a, str>, &'a str)> {
        let (authority, path) = split_url(self.base)?;
        // A base with no path is split as `/`, which a joined target replaces.
        let path = if !self.target.is_empty() && path == "/" {
            Cow::Borrowed("")
        } else {
            path
        };
        Some((authority, path, self.target))
    }

    /// The whole URL.
    pub fn url(&self) -> Cow<'a, str> {
        if self.target.is_empty() {
            Cow::Borrowed(self.base)
        } else {
            Cow::Owned([self.base, self.target].concat())
        }
    }
}

impl<'a> From<&'a str> for Address<'a> {
    fn from(url: &'a str) -> Address<'a> {
        Address {
            base: url,
            target: "",
        }
    }
}

impl<'a> From<&'a String> for Address<'a> {
    fn from(url: &'a String) -> Address<'a> {
        Address::from(url.as_str())
    }
}

/// The proxy variables, each pair in the order the matcher reads it.
const PROXY_VARS: [[&str; 2]; 3] = [
    ["HTTPS_PROXY", "https_proxy"],
    ["HTTP_PROXY", "http_proxy"],
    ["ALL_PROXY", "all_proxy"],
];

/// The first proxy variable the matcher would read and not use, and why: it takes a
/// value it cannot parse, or of a scheme it does not know, for "no proxy"; an empty
/// upper-case variable hides its lower-case twin; and `REQUEST_METHOD` (a CGI
/// environment) turns them all off. Each would send requests direct without a
/// word. `var` reads the environment.
fn unusable_proxy_var(
    var: impl Fn(&str) -> Option<String>,
) -> Option<(&'static str, &'static str)> {
    let set = |name: &str| var(name).filter(|value| !value.trim().is_empty());
    let probe = Uri::from_static("http://upstream.invalid/");
    for [upper, lower] in PROXY_VARS {
        let (name, value) = match (var(upper), set(lower)) {
            (Some(value), lower_set) if value.trim().is_empty() => {
                if lower_set.is_some() {
                    return Some((upper, "is empty, which hides its lower-case form"));
                }
                continue;
            }
            (Some(value), _) => (upper, value),
            (None, Some(value)) => (lower, value),
            (None, None) => continue,
        };
        if var("REQUEST_METHOD").is_some() {
            return Some((
                name,
                "is off while REQUEST_METHOD is set (a CGI environment)",
            ));
        }
        if Matcher::builder()
            .all(value)
            .build()
            .intercept(&probe)
            .is_none()
        {
            return Some((
                name,
                "is not a proxy URL mdproxy can use (http, https, socks4, socks4a, socks5, socks5h)",
            ));
        }
    }
    None
}

/// Whether the proxy settings send requests to `base` through a proxy.
fn wants_proxy(matcher: &Matcher, base: &str) -> bool {
    base.parse::<Uri>()
        .is_ok_and(|uri| matcher.intercept(&uri).is_some())
}

/// One of a request's own headers (its ID, its trace), beside the common ones: a
/// request has a few, so a list rather than a map (a map cost a miss two
/// allocations and a hash a header).
pub type Own = (HeaderName, HeaderValue);

/// The headers every request to the upstream carries, with the lines the direct
/// path writes of them rendered once (a request's head is then its line, these
/// bytes and its own few headers). No `Debug`: they hold the token.
pub struct CommonHeaders {
    map: HeaderMap,
    /// `name: value` and CRLF for each of `map`'s headers.
    lines: Vec<u8>,
    has_host: bool,
}

impl CommonHeaders {
    pub fn new(map: HeaderMap) -> CommonHeaders {
        let mut lines = Vec::new();
        exchange::put_lines(&mut lines, &map);
        CommonHeaders {
            has_host: map.contains_key(http::header::HOST),
            map,
            lines,
        }
    }

    /// The headers.
    pub fn map(&self) -> &HeaderMap {
        &self.map
    }

    /// These with `own` over them: one of `own` replaces these of its name.
    fn with(&self, own: &[Own]) -> HeaderMap {
        let mut map = self.map.clone();
        for (name, _) in own {
            map.remove(name);
        }
        for (name, value) in own {
            map.append(name.clone(), value.clone());
        }
        map
    }
}

/// One GET over a kept connection: the URL's path and query as the target, `Host`
/// from the URL when the headers carry none.
async fn direct_get(
    pool: &Pool,
    address: Address<'_>,
    common: &CommonHeaders,
    own: &[Own],
    limit: u64,
) -> Result<Received, WireError> {
    let (authority, path, rest) = address.split().ok_or(WireError::Unreachable)?;
    let head = exchange::request_head((&path, rest), authority, common, own)
        .ok_or(WireError::Unreachable)?;
    pool.send(pool.take(), address.base, &head, limit).await
}

/// An `http` or `https` URL's authority and its request target (origin form: the
/// path and query, `/` when it has no path), without parsing the rest: the URL is
/// parsed whole only when a connection is made.
fn split_url(url: &str) -> Option<(&str, Cow<'_, str>)> {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))?;
    // memchr's searches: `find` with a char pattern costs a miss a few hundred
    // instructions here.
    let rest = memchr::memchr(b'#', rest.as_bytes()).map_or(rest, |at| &rest[..at]);
    let at = memchr::memchr2(b'/', b'?', rest.as_bytes()).unwrap_or(rest.len());
    let (authority, target) = rest.split_at(at);
    if authority.is_empty() {
        return None;
    }
    let target = match target.as_bytes().first() {
        Some(b'/') => Cow::Borrowed(target),
        _ => Cow::Owned(format!("/{target}")),
    };
    Some((authority, target))
}

/// Kept connections over rustls (HTTP/1.1, TCP_NODELAY, the pool's idle limits),
/// plain `http://` allowed for a loopback upstream (validation decides where).
fn direct(settings: Settings, roots: RootCertStore) -> Result<Pool, BuildError> {
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(BuildError::Tls)?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    http.set_connect_timeout(Some(settings.connect_timeout));
    // reqwest's defaults, which this client replaced: a peer gone silent is found
    // by the kernel, not by the next request's timeout.
    http.set_keepalive(Some(KEEPALIVE));
    http.set_keepalive_interval(Some(KEEPALIVE));
    http.set_keepalive_retries(Some(3));
    #[cfg(target_os = "linux")]
    http.set_tcp_user_timeout(Some(USER_TIMEOUT));
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .wrap_connector(http);
    let https = Bounded {
        inner: https,
        limit: settings.connect_timeout,
    };
    Ok(Pool::new(https, settings.pool_max_idle_per_host, POOL_IDLE))
}

/// A connector whose connects, TCP and TLS together, end within `limit`: the TCP
/// connector's own timeout leaves the handshake unbounded, and a connect the pool
/// stops waiting for (a pooled connection came free first) goes on in a task of its
/// own, which an upstream that never answers the handshake would hold for good.
#[derive(Clone)]
pub struct Bounded<C> {
    inner: C,
    limit: Duration,
}

impl<C> tower_service::Service<Uri> for Bounded<C>
where
    C: tower_service::Service<Uri>,
    C::Future: Send + 'static,
    C::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Response = C::Response;
    type Error = Box<dyn std::error::Error + Send + Sync>;
    type Future = futures_util::future::BoxFuture<'static, Result<C::Response, Self::Error>>;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let connect = self.inner.call(uri);
        let limit = self.limit;
        Box::pin(async move {
            match tokio::time::timeout(limit, connect).await {
                Ok(connected) => connected.map_err(Into::into),
                Err(_) => Err(std::io::Error::from(std::io::ErrorKind::TimedOut).into()),
            }
        })
    }
}

/// reqwest with the environment's proxy (`proxy: None`) or the one given, no
/// redirects followed (following one would cache another host's answer under our
/// key), no `Referer`.
fn proxied_client(
    settings: Settings,
    proxy: Option<reqwest::Proxy>,
) -> Result<reqwest::Client, BuildError> {
    let mut builder = reqwest::Client::builder()
        .connect_timeout(settings.connect_timeout)
        .pool_max_idle_per_host(settings.pool_max_idle_per_host)
        .pool_idle_timeout(POOL_IDLE)
        .tcp_nodelay(true)
        .redirect(reqwest::redirect::Policy::none())
        .referer(false);
    if let Some(proxy) = proxy {
        builder = builder.proxy(proxy);
    }
    builder.build().map_err(BuildError::Reqwest)
}

/// A timeout anywhere in the error's causes (the connect timeout's `TimedOut`, or
/// reqwest's own on the proxied path) is a timeout; anything else means the
/// upstream is not there.
fn wire_error(e: &(dyn std::error::Error + 'static)) -> WireError {
    let mut cause = Some(e);
    while let Some(error) = cause {
        if error
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut)
            || error
                .downcast_ref::<reqwest::Error>()
                .is_some_and(reqwest::Error::is_timeout)
        {
            return WireError::Timeout;
        }
        cause = error.source();
    }
    WireError::Unreachable
}

/// Whether the body ended where the connection did, by the rule hyper reads a
/// response with (RFC 9112, 6.3): with a `Transfer-Encoding`, unless its last coding
/// is `chunked` (a `Content-Length` beside it does not count); without one, unless
/// it has a `Content-Length`.
fn is_close_delimited(version: Version, headers: &HeaderMap) -> bool {
    if version > Version::HTTP_11 {
        return false;
    }
    match headers
        .get_all(http::header::TRANSFER_ENCODING)
        .iter()
        .next_back()
    {
        Some(last) => !ends_chunked(last.as_bytes()),
        None => !headers.contains_key(http::header::CONTENT_LENGTH),
    }
}

/// Whether a `Transfer-Encoding` value's last coding is `chunked`: the one rule both
/// paths frame a body by (here for reqwest's answers, in `exchange` for the direct
/// path's).
fn ends_chunked(codings: &[u8]) -> bool {
    codings
        .rsplit(|&b| b == b',')
        .next()
        .is_some_and(|coding| coding.trim_ascii().eq_ignore_ascii_case(b"chunked"))
}

fn content_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(http::header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .parse()
        .ok()
}

fn capacity(announced: Option<u64>) -> usize {
    usize::try_from(announced.unwrap_or(0)).unwrap_or(0)
}

fn append(body: &mut BytesMut, chunk: &[u8], limit: u64) -> Result<(), WireError> {
    if (body.len() + chunk.len()) as u64 > limit {
        return Err(WireError::TooLarge { limit });
    }
    body.extend_from_slice(chunk);
    Ok(())
}

/// Reads an answer whole: its head, then its body frame by frame, refused as soon
/// as it passes `limit` bytes (or announces more): nothing past the limit is ever
/// buffered. The body is copied into a buffer of its own: a frame is a slice of the
/// connection's read buffer, and keeping it would pin that whole buffer for as long
/// as the answer is cached (a flood of small 404s took the process from 150 MB to
/// 1 GB when it did).
async fn read<B>(response: http::Response<B>, limit: u64) -> Result<Received, WireError>
where
    B: hyper::body::Body<Data = Bytes> + Unpin,
    B::Error: std::error::Error + 'static,
{
    let (head, mut body) = response.into_parts();
    let announced = content_length(&head.headers);
    if announced.is_some_and(|n| n > limit) {
        return Err(WireError::TooLarge { limit });
    }
    let mut buffer = BytesMut::with_capacity(capacity(announced));
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| wire_error(&e))?;
        if let Ok(data) = frame.into_data() {
            append(&mut buffer, &data, limit)?;
        }
    }
    let retry_after = head.headers.get(http::header::RETRY_AFTER).cloned();
    let date = retry_after
        .as_ref()
        .and_then(|_| head.headers.get(http::header::DATE).cloned());
    Ok(Received {
        status: head.status,
        retry_after,
        date,
        body: buffer.freeze(),
        close_delimited: is_close_delimited(head.version, &head.headers),
    })
}

mod exchange;
mod pool;
#[cfg(test)]
mod tests;
