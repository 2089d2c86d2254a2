use super::*;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use rustls_pki_types::{CertificateDer, PrivatePkcs8KeyDer};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const BODY: &[u8] = br#"{"success":true,"data":[1,2,3]}"#;

fn settings() -> Settings {
    Settings {
        connect_timeout: Duration::from_secs(5),
        pool_max_idle_per_host: 4,
    }
}

fn headers() -> CommonHeaders {
    let mut headers = HeaderMap::new();
    headers.insert(
        http::header::ACCEPT,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(
        http::header::AUTHORIZATION,
        HeaderValue::from_static("Bearer t0ken"),
    );
    CommonHeaders::new(headers)
}

/// One request head read from `stream`, lowercased; `None` at its end (or past
/// 16 KiB without one).
async fn read_head<S: AsyncRead + Unpin>(stream: &mut S) -> Option<String> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if head.len() > 16 * 1024 || stream.read(&mut byte).await.ok()? == 0 {
            return None;
        }
        head.push(byte[0]);
    }
    Some(String::from_utf8_lossy(&head).to_ascii_lowercase())
}

/// Answers every request on `stream` with [`BODY`], recording its head.
async fn answer<S: AsyncRead + AsyncWrite + Unpin>(mut stream: S, heads: Arc<Mutex<Vec<String>>>) {
    while let Some(head) = read_head(&mut stream).await {
        heads.lock().unwrap().push(head);
        let answer = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", BODY.len());
        if stream.write_all(answer.as_bytes()).await.is_err()
            || stream.write_all(BODY).await.is_err()
        {
            return;
        }
    }
}

/// An HTTPS server for `localhost` with a certificate of its own, answering
/// [`BODY`]: its address, its certificate and the request heads it saw.
async fn tls_upstream() -> (SocketAddr, CertificateDer<'static>, Arc<Mutex<Vec<String>>>) {
    let pair = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    let cert = pair.cert.der().clone();
    let key = PrivatePkcs8KeyDer::from(pair.signing_key.serialize_der());
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert.clone()], key.into())
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let heads = Arc::new(Mutex::new(Vec::new()));
    let seen = heads.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, seen) = (acceptor.clone(), seen.clone());
            tokio::spawn(async move {
                if let Ok(tls) = acceptor.accept(tcp).await {
                    answer(tls, seen).await;
                }
            });
        }
    });
    (addr, cert, heads)
}

/// The direct client speaks TLS to an upstream its roots trust, sends the
/// client's headers with `Host` from the URL, and reads the answer whole.
#[tokio::test]
async fn an_https_upstream_is_read_over_rustls() {
    let (addr, cert, heads) = tls_upstream().await;
    let mut roots = RootCertStore::empty();
    roots.add(cert).unwrap();
    let transport = Transport::Direct(direct(settings(), roots).unwrap());
    let url = format!(
        "https://localhost:{}/api/v1/stock/detail/600519",
        addr.port()
    );
    for _ in 0..2 {
        let got = transport.get(&url, &headers(), &[], 1024).await.unwrap();
        assert_eq!(got.status, StatusCode::OK);
        assert_eq!(&got.body[..], BODY);
        assert!(!got.close_delimited);
    }
    let heads = heads.lock().unwrap().clone();
    assert_eq!(heads.len(), 2);
    // The body is a buffer of its own, sized to it: a slice of the connection's read
    // buffer would pin that buffer for as long as the answer is cached.
    let got = transport.get(&url, &headers(), &[], 1024).await.unwrap();
    let own = got
        .body
        .try_into_mut()
        .expect("the body's buffer is its own");
    assert_eq!(own.capacity(), BODY.len());
    let head = &heads[0];
    assert!(
        head.starts_with("get /api/v1/stock/detail/600519 http/1.1\r\n"),
        "{head}"
    );
    assert!(
        head.contains(&format!("host: localhost:{}\r\n", addr.port())),
        "{head}"
    );
    assert!(head.contains("authorization: bearer t0ken\r\n"), "{head}");
    assert!(head.contains("accept: application/json\r\n"), "{head}");
}

/// A certificate the webpki roots do not vouch for is refused: the upstream is
/// unreachable, nothing is read.
#[tokio::test]
async fn a_certificate_the_roots_do_not_trust_is_refused() {
    let (addr, _, heads) = tls_upstream().await;
    let transport = Transport::new("https://localhost/api/v1", settings()).unwrap();
    if transport.is_proxied() {
        return; // this environment proxies every host; the test below covers that
    }
    let url = format!("https://localhost:{}/api/v1/market/indices", addr.port());
    let got = transport.get(&url, &headers(), &[], 1024).await;
    assert_eq!(got.unwrap_err(), WireError::Unreachable);
    assert!(heads.lock().unwrap().is_empty());
}

/// The proxy settings decide per host, `NO_PROXY` excepted; without any, the
/// upstream is reached directly.
#[test]
fn the_proxy_settings_decide_which_way() {
    let proxy = "http://127.0.0.1:3128";
    let matcher = Matcher::builder()
        .http(proxy)
        .https(proxy)
        .no("internal.example")
        .build();
    assert!(wants_proxy(&matcher, "https://up.example.com/api/v1"));
    assert!(wants_proxy(&matcher, "http://up.example.com:8081/api/v1"));
    assert!(!wants_proxy(
        &matcher,
        "https://api.internal.example/api/v1"
    ));
    let https_only = Matcher::builder().https(proxy).build();
    assert!(!wants_proxy(&https_only, "http://127.0.0.1:8081/api/v1"));
    assert!(!wants_proxy(
        &Matcher::builder().build(),
        "https://up.example.com/api/v1"
    ));
}

/// Through a proxy, the request goes to the proxy in absolute form, the client's
/// headers with it, and the answer comes back as a direct one does.
#[tokio::test]
async fn a_proxy_carries_the_request() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let heads = Arc::new(Mutex::new(Vec::new()));
    let seen = heads.clone();
    tokio::spawn(async move {
        if let Ok((tcp, _)) = listener.accept().await {
            answer(tcp, seen).await;
        }
    });
    let proxy = reqwest::Proxy::all(format!("http://{addr}")).unwrap();
    let transport = Transport::Proxied(proxied_client(settings(), Some(proxy)).unwrap());
    let got = transport
        .get(
            "http://upstream.invalid/api/v1/macro/cpi",
            &headers(),
            &[],
            1024,
        )
        .await
        .unwrap();
    assert_eq!((got.status, &got.body[..]), (StatusCode::OK, BODY));
    let own = got
        .body
        .try_into_mut()
        .expect("the body's buffer is its own");
    assert_eq!(own.capacity(), BODY.len());
    let head = heads.lock().unwrap()[0].clone();
    assert!(
        head.starts_with("get http://upstream.invalid/api/v1/macro/cpi http/1.1\r\n"),
        "{head}"
    );
    assert!(head.contains("authorization: bearer t0ken\r\n"), "{head}");
}

/// A listener whose accept queue (backlog 0) is full, so the kernel drops the next
/// handshake and a connect to it hangs; the connections that filled it are held.
async fn full_listener() -> (tokio::net::TcpListener, Vec<TcpStream>) {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(0).unwrap();
    let addr = listener.local_addr().unwrap();
    let mut held = Vec::new();
    let mut hung = false;
    for _ in 0..32 {
        match tokio::time::timeout(Duration::from_millis(300), TcpStream::connect(addr)).await {
            Ok(Ok(stream)) => held.push(stream),
            _ => {
                hung = true;
                break;
            }
        }
    }
    assert!(
        hung,
        "the accept queue never filled after {} connects",
        held.len()
    );
    (listener, held)
}

fn quick() -> Settings {
    Settings {
        connect_timeout: Duration::from_millis(200),
        ..settings()
    }
}

/// A connect that outlasts `connect_timeout` is a timeout, not an outage.
#[tokio::test]
async fn a_connect_past_its_timeout_is_a_timeout() {
    let (listener, held) = full_listener().await;
    let addr = listener.local_addr().unwrap();
    let transport = Transport::Direct(direct(quick(), RootCertStore::empty()).unwrap());
    let got = tokio::time::timeout(
        Duration::from_secs(20),
        transport.get(&format!("http://{addr}/api/v1/x"), &headers(), &[], 1024),
    )
    .await
    .expect("the connect timeout ends the connect");
    assert_eq!(got.unwrap_err(), WireError::Timeout);
    drop((held, listener));
}

/// A listener that accepts every connection and never sends a byte: its address,
/// and the task holding the connections (abort it at the end).
async fn silent_listener() -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let silent = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((tcp, _)) = listener.accept().await {
            held.push(tcp);
        }
    });
    (addr, silent)
}

/// A TLS handshake the upstream never answers ends within `connect_timeout` too,
/// as a timeout: the TCP connect's own timeout does not cover it.
#[tokio::test]
async fn a_handshake_past_the_connect_timeout_is_a_timeout() {
    let (addr, silent) = silent_listener().await;
    let roots = RootCertStore::empty();
    let transport = Transport::Direct(direct(quick(), roots).unwrap());
    let url = format!("https://localhost:{}/api/v1/x", addr.port());
    let got = tokio::time::timeout(
        Duration::from_secs(20),
        transport.get(&url, &headers(), &[], 1024),
    )
    .await
    .expect("the connect timeout ends the handshake");
    assert_eq!(got.unwrap_err(), WireError::Timeout);
    silent.abort();
}

/// Through a proxy that never answers the tunnel's `CONNECT`, the connect timeout
/// is a timeout as well: reqwest says so with an error of its own, not an I/O error.
#[tokio::test]
async fn a_proxy_tunnel_past_the_connect_timeout_is_a_timeout() {
    let (addr, silent) = silent_listener().await;
    let proxy = reqwest::Proxy::all(format!("http://{addr}")).unwrap();
    let transport = Transport::Proxied(proxied_client(quick(), Some(proxy)).unwrap());
    let got = tokio::time::timeout(
        Duration::from_secs(20),
        transport.get("https://upstream.invalid/api/v1/x", &headers(), &[], 1024),
    )
    .await
    .expect("the connect timeout ends the tunnel");
    assert_eq!(got.unwrap_err(), WireError::Timeout);
    silent.abort();
}

/// A body ends with its connection unless it is framed, by hyper's rule: a
/// `Transfer-Encoding` whose last coding is `chunked`, or else a `Content-Length`.
#[test]
fn close_delimited_follows_hypers_framing() {
    let with = |pairs: &[(&str, &str)]| {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.append(
                http::header::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        is_close_delimited(Version::HTTP_11, &headers)
    };
    assert!(with(&[]));
    assert!(!with(&[("content-length", "5")]));
    assert!(!with(&[("transfer-encoding", "chunked")]));
    assert!(!with(&[("transfer-encoding", "gzip, Chunked")]));
    // A length beside a transfer coding does not count, and only the last coding
    // of the last header frames the body.
    assert!(with(&[
        ("content-length", "5000"),
        ("transfer-encoding", "identity")
    ]));
    assert!(with(&[("transfer-encoding", "chunked, gzip")]));
    assert!(with(&[
        ("transfer-encoding", "chunked"),
        ("transfer-encoding", "gzip")
    ]));
    assert!(!with(&[
        ("transfer-encoding", "gzip"),
        ("transfer-encoding", "chunked")
    ]));
    assert!(!is_close_delimited(Version::HTTP_2, &HeaderMap::new()));
}

/// A proxy variable the matcher would ignore stops the transport from being built,
/// instead of requests going direct without a word; an unset or usable one does not.
#[test]
fn an_unusable_proxy_variable_is_refused() {
    let env = |pairs: &'static [(&'static str, &'static str)]| {
        move |name: &str| {
            pairs
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| (*v).to_owned())
        }
    };
    assert_eq!(unusable_proxy_var(env(&[])), None);
    assert_eq!(
        unusable_proxy_var(env(&[("https_proxy", "http://user:pw@proxy:3128")])),
        None
    );
    assert_eq!(
        unusable_proxy_var(env(&[("ALL_PROXY", "socks5h://proxy:1080")])),
        None
    );
    assert_eq!(unusable_proxy_var(env(&[("HTTP_PROXY", "")])), None);
    assert_eq!(
        unusable_proxy_var(env(&[("HTTPS_PROXY", "ftp://proxy:21")])).map(|(n, _)| n),
        Some("HTTPS_PROXY")
    );
    assert_eq!(
        unusable_proxy_var(env(&[("http_proxy", "http://[::1")])).map(|(n, _)| n),
        Some("http_proxy")
    );
    assert_eq!(
        unusable_proxy_var(env(&[
            ("HTTPS_PROXY", ""),
            ("https_proxy", "http://proxy:3128")
        ]))
        .map(|(n, _)| n),
        Some("HTTPS_PROXY")
    );
    assert_eq!(
        unusable_proxy_var(env(&[
            ("REQUEST_METHOD", "GET"),
            ("all_proxy", "http://proxy:3128")
        ]))
        .map(|(n, _)| n),
        Some("all_proxy")
    );
    let error = BuildError::Proxy {
        variable: "HTTPS_PROXY",
        why: "is not a proxy URL mdproxy can use",
    };
    assert!(!error.to_string().contains("pw"), "{error}");
}

/// How a test upstream ends each connection.
#[derive(Clone)]
enum Ending {
    /// Answers every request on it.
    KeepAlive,
    /// Answers one request, then closes when the cue is given.
    AfterOne(Arc<tokio::sync::Notify>),
    /// Answers one request with `Connection: close`, then closes.
    Announced,
    /// Closes the first connection before any request, answers on the others.
    FirstShut,
    /// Resets the first connection (RST) before any request, answers on the others.
    FirstReset,
    /// Answers the first request, reads the second and closes without an answer.
    SwallowsSecond,
}

/// A plain HTTP upstream answering [`BODY`]: its address, how many connections it
/// took, and a message for each connection it closed.
async fn plain_upstream(
    ending: Ending,
) -> (
    SocketAddr,
    Arc<std::sync::atomic::AtomicUsize>,
    tokio::sync::mpsc::UnboundedReceiver<()>,
) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (closed, closes) = tokio::sync::mpsc::unbounded_channel();
    let count = Arc::clone(&accepted);
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            let first = count.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0;
            let (closed, ending) = (closed.clone(), ending.clone());
            tokio::spawn(async move {
                if matches!(ending, Ending::FirstShut | Ending::FirstReset) && first {
                    if matches!(ending, Ending::FirstReset) {
                        tcp.set_zero_linger().unwrap();
                    }
                    drop(tcp);
                    let _ = closed.send(());
                    return;
                }
                if matches!(
                    ending,
                    Ending::KeepAlive | Ending::FirstShut | Ending::FirstReset
                ) {
                    return answer(tcp, Arc::default()).await;
                }
                if matches!(ending, Ending::SwallowsSecond) {
                    if read_head(&mut tcp).await.is_some() {
                        let head =
                            format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", BODY.len());
                        let _ = tcp.write_all(head.as_bytes()).await;
                        let _ = tcp.write_all(BODY).await;
                        let _ = read_head(&mut tcp).await;
                    }
                    drop(tcp);
                    let _ = closed.send(());
                    return;
                }
                if read_head(&mut tcp).await.is_some() {
                    let close = if matches!(ending, Ending::Announced) {
                        "connection: close\r\n"
                    } else {
                        ""
                    };
                    let head = format!(
                        "HTTP/1.1 200 OK\r\n{close}content-length: {}\r\n\r\n",
                        BODY.len()
                    );
                    let _ = tcp.write_all(head.as_bytes()).await;
                    let _ = tcp.write_all(BODY).await;
                }
                if let Ending::AfterOne(cue) = &ending {
                    cue.notified().await;
                }
                drop(tcp);
                let _ = closed.send(());
            });
        }
    });
    (addr, accepted, closes)
}

fn plain(addr: SocketAddr) -> String {
    format!("http://{addr}/api/v1/stock/detail/600519")
}

fn pool_of(transport: &Transport) -> &Pool {
    match transport {
        Transport::Direct(pool) => pool,
        Transport::Proxied(_) => unreachable!("a direct transport"),
    }
}

/// A connection goes back to the pool once its answer is whole, and the next
/// request takes it: three requests, one connection.
#[tokio::test]
async fn a_connection_is_kept_and_taken_again() {
    let (addr, accepted, _) = plain_upstream(Ending::KeepAlive).await;
    let transport = Transport::Direct(direct(settings(), RootCertStore::empty()).unwrap());
    for _ in 0..3 {
        let got = transport
            .get(&plain(addr), &headers(), &[], 1024)
            .await
            .unwrap();
        assert_eq!(&got.body[..], BODY);
    }
    assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 1);
    assert_eq!(pool_of(&transport).idle(), 1);
}

/// Whether `open` says no within 2 s: an upstream's close reaches this side's
/// socket at once on loopback, and the runtime sees it at its next look at the
/// sockets.
async fn closed_soon(mut open: impl FnMut() -> bool) -> bool {
    for _ in 0..2000 {
        if !open() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    !open()
}

/// An idle connection the upstream closed is found closed and dropped, not
/// taken, and the next request goes out on a new one, without an error.
#[tokio::test]
async fn an_idle_connection_the_upstream_closed_is_not_taken() {
    let cue = Arc::new(tokio::sync::Notify::new());
    let (addr, accepted, mut closes) = plain_upstream(Ending::AfterOne(Arc::clone(&cue))).await;
    let transport = Transport::Direct(direct(settings(), RootCertStore::empty()).unwrap());
    let pool = pool_of(&transport);
    transport
        .get(&plain(addr), &headers(), &[], 1024)
        .await
        .unwrap();
    assert_eq!(pool.open_idle(), 1, "kept while the upstream holds it open");
    cue.notify_one();
    closes.recv().await.unwrap();
    assert!(
        closed_soon(|| pool.open_idle() > 0).await,
        "the upstream closed it"
    );
    assert_eq!(pool.idle(), 1, "still held until a request looks at it");
    assert!(pool.take().is_none(), "the closed connection is not taken");
    assert_eq!(pool.idle(), 0, "and it is dropped");
    let got = transport
        .get(&plain(addr), &headers(), &[], 1024)
        .await
        .unwrap();
    assert_eq!(&got.body[..], BODY);
    assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 2);
}

/// A request a kept connection never sent, because the connection ended before
/// it went out, is sent on a new one: here the connection handed over has already
/// ended, as one does when the upstream's close lands between the pool's look
/// and the send.
#[tokio::test]
async fn a_request_a_closed_connection_never_sent_goes_out_on_a_new_one() {
    let (addr, accepted, mut closes) = plain_upstream(Ending::FirstShut).await;
    let transport = Transport::Direct(direct(settings(), RootCertStore::empty()).unwrap());
    let pool = pool_of(&transport);
    let url = plain(addr);
    let mut conn = pool.connect(&url).await.unwrap();
    closes.recv().await.unwrap();
    assert!(
        closed_soon(|| conn.still_open()).await,
        "the upstream closed it"
    );
    let got = send_on(pool, conn, addr).await;
    assert_eq!(&got.expect("sent on a new connection").body[..], BODY);
    assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 2);
}

/// The test request sent by `pool` on `conn`, a kept connection to `addr`, within
/// 20 s (a connection that ended fails its request at once).
async fn send_on(
    pool: &Pool,
    conn: Box<pool::Conn>,
    addr: SocketAddr,
) -> Result<Received, WireError> {
    let target = "/api/v1/stock/detail/600519";
    let head = exchange::request_head((target, ""), &addr.to_string(), &headers(), &[]).unwrap();
    tokio::time::timeout(
        Duration::from_secs(20),
        pool.send(Some(conn), &plain(addr), &head, 1024),
    )
    .await
    .expect("an ended connection fails its request at once")
}

/// A request a kept connection could not write, because the upstream reset the
/// connection after the pool's look, goes out on a new one: the upstream never
/// read it, so it was not counted.
#[tokio::test]
async fn a_request_a_kept_connection_could_not_write_goes_out_on_a_new_one() {
    let (addr, accepted, mut closes) = plain_upstream(Ending::FirstReset).await;
    let transport = Transport::Direct(direct(settings(), RootCertStore::empty()).unwrap());
    let pool = pool_of(&transport);
    let url = plain(addr);
    let conn = pool.connect(&url).await.unwrap();
    closes.recv().await.unwrap();
    // On loopback the reset reaches this side within the upstream's close; the
    // pause is a margin. The connection is not looked at (it would be found
    // ended): it is handed over as if it had been taken just before.
    tokio::time::sleep(Duration::from_millis(20)).await;
    let got = send_on(pool, conn, addr).await;
    assert_eq!(&got.expect("sent on a new connection").body[..], BODY);
    assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 2);
}

/// A request that went out on a kept connection is not sent again when the
/// connection ends before its answer: the upstream may have counted it (against
/// the key's quota), so the caller gets the failure and no second request is made.
#[tokio::test]
async fn a_request_that_went_out_is_not_sent_again() {
    let (addr, accepted, _) = plain_upstream(Ending::SwallowsSecond).await;
    let transport = Transport::Direct(direct(settings(), RootCertStore::empty()).unwrap());
    let got = transport
        .get(&plain(addr), &headers(), &[], 1024)
        .await
        .unwrap();
    assert_eq!(&got.body[..], BODY);
    assert_eq!(pool_of(&transport).idle(), 1, "the connection is kept");
    let second = tokio::time::timeout(
        Duration::from_secs(20),
        transport.get(&plain(addr), &headers(), &[], 1024),
    )
    .await
    .expect("a connection closed before its answer fails the request at once");
    assert!(
        matches!(second, Err(WireError::Unreachable)),
        "{:?}",
        second.map(|r| r.status)
    );
    assert_eq!(
        accepted.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "not sent again on a new connection"
    );
}

/// An answer with `Connection: close` leaves nothing to keep.
#[tokio::test]
async fn a_connection_the_answer_closes_is_not_kept() {
    let (addr, accepted, _) = plain_upstream(Ending::Announced).await;
    let transport = Transport::Direct(direct(settings(), RootCertStore::empty()).unwrap());
    for _ in 0..2 {
        let got = transport
            .get(&plain(addr), &headers(), &[], 1024)
            .await
            .unwrap();
        assert_eq!(&got.body[..], BODY);
        assert_eq!(pool_of(&transport).idle(), 0);
    }
    assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 2);
}

/// Requests at once each take a connection of their own; no more than
/// `pool_max_idle_per_host` are kept after them.
#[tokio::test]
async fn no_more_idle_connections_are_kept_than_asked() {
    let (addr, accepted, _) = plain_upstream(Ending::KeepAlive).await;
    let settings = Settings {
        pool_max_idle_per_host: 2,
        ..settings()
    };
    let transport = Transport::Direct(direct(settings, RootCertStore::empty()).unwrap());
    let url = plain(addr);
    let common = headers();
    let four = (0..4).map(|_| transport.get(&url, &common, &[], 1024));
    for got in futures_util::future::join_all(four).await {
        assert_eq!(&got.unwrap().body[..], BODY);
    }
    assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 4);
    assert_eq!(pool_of(&transport).idle(), 2);
}

/// A connection idle past its time is not taken: with no idle time at all, every
/// request makes a connection, and the ones past their time are dropped.
#[tokio::test]
async fn a_connection_idle_past_its_time_is_not_taken() {
    let (addr, accepted, _) = plain_upstream(Ending::KeepAlive).await;
    let pool = direct(settings(), RootCertStore::empty())
        .unwrap()
        .idle_for(Duration::ZERO);
    let transport = Transport::Direct(pool);
    for _ in 0..3 {
        transport
            .get(&plain(addr), &headers(), &[], 1024)
            .await
            .unwrap();
        assert_eq!(pool_of(&transport).idle(), 1, "the older one is dropped");
    }
    assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 3);
}

/// A URL's authority and target are taken apart without a parse: the target in
/// origin form whatever the URL's path, a fragment dropped, and a URL of another
/// scheme, or without a host, refused.
#[test]
fn a_url_splits_into_its_authority_and_target() {
    let split = |url| split_url(url).map(|(authority, target)| (authority, target.into_owned()));
    let cases = [
        ("http://h:1/api/v1/x?a=1", Some(("h:1", "/api/v1/x?a=1"))),
        ("https://h", Some(("h", "/"))),
        ("http://h?a=1", Some(("h", "/?a=1"))),
        ("http://h/a#part", Some(("h", "/a"))),
        ("ftp://h/a", None),
        ("http:///a", None),
    ];
    for (url, want) in cases {
        let want = want.map(|(authority, target)| (authority, target.to_owned()));
        assert_eq!(split(url), want, "{url}");
    }
}

/// A base and a target after it go on the wire as their joined URL would: the same
/// authority and the same request target, with no URL made.
#[test]
fn a_joined_address_splits_as_its_whole_url() {
    for base in [
        "http://h",
        "https://h:8443",
        "http://h/api/v1",
        "http://h:1/a/b",
    ] {
        for target in ["/news/search?keyword=x", "/stock/detail/600000", "/"] {
            let address = Address::joined(base, target);
            let (authority, path, rest) = address.split().unwrap();
            let url = address.url();
            let (whole_authority, whole_target) = split_url(&url).unwrap();
            assert_eq!(authority, whole_authority, "{base} {target}");
            assert_eq!([&*path, rest].concat(), whole_target, "{base} {target}");
        }
    }
    // A whole URL is its own base.
    let (authority, path, rest) = Address::from("http://h:1/x?a=1").split().unwrap();
    assert_eq!((authority, &*path, rest), ("h:1", "/x?a=1", ""));
}
