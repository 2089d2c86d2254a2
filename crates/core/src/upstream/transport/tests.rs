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

fn headers() -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(
        http::header::ACCEPT,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(
        http::header::AUTHORIZATION,
        HeaderValue::from_static("Bearer t0ken"),
    );
    headers
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
        let got = transport.get(&url, headers(), 1024).await.unwrap();
        assert_eq!(got.status, StatusCode::OK);
        assert_eq!(&got.body[..], BODY);
        assert!(!got.close_delimited);
    }
    let heads = heads.lock().unwrap().clone();
    assert_eq!(heads.len(), 2);
    // The body is a buffer of its own, sized to it: a slice of the connection's read
    // buffer would pin that buffer for as long as the answer is cached.
    let got = transport.get(&url, headers(), 1024).await.unwrap();
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
    let got = transport.get(&url, headers(), 1024).await;
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
        .get("http://upstream.invalid/api/v1/macro/cpi", headers(), 1024)
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
        transport.get(&format!("http://{addr}/api/v1/x"), headers(), 1024),
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
        transport.get(&url, headers(), 1024),
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
        transport.get("https://upstream.invalid/api/v1/x", headers(), 1024),
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

/// A serving thread's requests go through a pool of its own, so that an upstream
/// connection is driven by the thread that uses it; other threads share one.
#[test]
fn each_serving_thread_has_a_pool_of_its_own() {
    let pools = Arc::new(
        direct(settings(), RootCertStore::empty())
            .unwrap()
            .for_threads(2),
    );
    let workers = crate::workers::Workers::start(3).unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let address = |pool: &Direct| std::ptr::from_ref(pool) as usize;
    let mut seen = Vec::new();
    for _ in 0..3 {
        let pools = Arc::clone(&pools);
        let here = workers.spawn(async move { address(pools.here()) });
        seen.push(runtime.block_on(here).unwrap());
    }
    let elsewhere = address(pools.here());
    assert_ne!(seen[0], seen[1], "two serving threads, two pools");
    assert_eq!(
        seen[2], seen[0],
        "a third thread past the pools shares the first's"
    );
    assert!(!seen.contains(&elsewhere), "other threads have their own");
    // The idle connections are shared out, not kept in full by every thread.
    let idle = |at| pools.settings_of(at).pool_max_idle_per_host;
    assert_eq!((idle(0), idle(1), idle(2)), (4, 2, 2));
    let odd = Pools::new(
        pools.connector.clone(),
        Settings {
            pool_max_idle_per_host: 5,
            ..settings()
        },
    )
    .for_threads(2);
    assert_eq!(
        (
            odd.settings_of(0).pool_max_idle_per_host,
            odd.settings_of(1).pool_max_idle_per_host
        ),
        (5, 3)
    );
}
