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

/// A connect that outlasts `connect_timeout` is a timeout, not an outage. The
/// listener's accept queue (backlog 0) is filled, so the kernel drops the next
/// handshake and the connect hangs.
#[tokio::test]
async fn a_connect_past_its_timeout_is_a_timeout() {
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
    let quick = Settings {
        connect_timeout: Duration::from_millis(200),
        ..settings()
    };
    let transport = Transport::Direct(direct(quick, RootCertStore::empty()).unwrap());
    let got = tokio::time::timeout(
        Duration::from_secs(20),
        transport.get(&format!("http://{addr}/api/v1/x"), headers(), 1024),
    )
    .await
    .expect("the connect timeout ends the connect");
    assert_eq!(got.unwrap_err(), WireError::Timeout);
    drop((held, listener));
}
