//! HTTP/2 and TLS at the edge: h2c by prior knowledge and HTTP/1.1 on the same
//! plain listener; over TLS, h2 or HTTP/1.1 by ALPN with a certificate made in the
//! test; many streams (quote streams too) on one connection; the certificate
//! reloaded without a restart; `serve` announces a TLS listener as `https://`.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Version};

const STREAM: &str = "/api/v1/stock/indicator/realtime/sse?codes=600519";

/// A self-signed certificate for `localhost`: (cert PEM, key PEM, cert DER).
fn certificate() -> (String, String, Vec<u8>) {
    let c = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    (
        c.cert.pem(),
        c.signing_key.serialize_pem(),
        c.cert.der().to_vec(),
    )
}

struct TlsFiles {
    dir: std::path::PathBuf,
    cert: std::path::PathBuf,
    key: std::path::PathBuf,
}

impl TlsFiles {
    fn new(name: &str, cert: &str, key: &str) -> TlsFiles {
        let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("tls-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let files = TlsFiles {
            cert: dir.join("cert.pem"),
            key: dir.join("key.pem"),
            dir,
        };
        files.write(cert, key);
        files
    }

    fn write(&self, cert: &str, key: &str) {
        std::fs::write(&self.cert, cert).unwrap();
        std::fs::write(&self.key, key).unwrap();
    }
}

impl Drop for TlsFiles {
    fn drop(&mut self) {
        std::fs::remove_dir_all(&self.dir).ok();
    }
}

async fn tls_env(files: &TlsFiles) -> support::Env {
    let (cert, key) = (
        files.cert.display().to_string(),
        files.key.display().to_string(),
    );
    support::start_with(
        |_| {},
        |c| {
            c.server.tls_cert = cert;
            c.server.tls_key = key;
        },
        Some(support::saturday()),
    )
    .await
}

/// One h2 connection over `io`, its driver spawned.
async fn h2_over<T>(io: T) -> h2::client::SendRequest<Bytes>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (send, connection) = h2::client::handshake(io).await.unwrap();
    tokio::spawn(async move {
        let _ = connection.await;
    });
    send
}

fn get(path: &str) -> Request<()> {
    Request::get(format!("http://localhost{path}"))
        .header("authorization", format!("Bearer {}", support::TOKEN))
        .body(())
        .unwrap()
}

/// Sends `path` on `send` and reads the first `limit` bytes of the body (or all).
async fn fetch(send: &h2::client::SendRequest<Bytes>, path: &str, limit: usize) -> (u16, Vec<u8>) {
    let mut send = send.clone().ready().await.unwrap();
    let (response, _) = send.send_request(get(path), true).unwrap();
    let response = response.await.unwrap();
    let status = response.status().as_u16();
    let mut body = response.into_body();
    let mut bytes = Vec::new();
    while bytes.len() < limit {
        match body.data().await {
            Some(Ok(chunk)) => {
                let _ = body.flow_control().release_capacity(chunk.len());
                bytes.extend_from_slice(&chunk);
            }
            _ => break,
        }
    }
    (status, bytes)
}

/// Cleartext: HTTP/1.1 as always, and HTTP/2 by prior knowledge on the same port,
/// with the same headers.
#[tokio::test]
async fn h2c_and_http1_share_the_plain_listener() {
    let env = support::start_with(|_| {}, |_| {}, Some(support::saturday())).await;
    let h1 = env.get("/market/indices").await;
    assert_eq!(h1.version(), Version::HTTP_11);
    let h2c = reqwest::Client::builder()
        .no_proxy()
        .http2_prior_knowledge()
        .build()
        .unwrap();
    let r = h2c
        .get(env.url("/market/indices"))
        .bearer_auth(support::TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.version(), Version::HTTP_2);
    assert_eq!(r.status(), 200);
    assert_eq!(support::header(&r, "x-cache"), "HIT");
    assert!(!support::header(&r, "etag").is_empty());
    let r = h2c.get(env.url("/market/indices")).send().await.unwrap();
    assert_eq!(r.status(), 401, "auth applies over h2 too");
}

/// Forty requests and eight quote streams at once on ONE HTTP/2 connection (a
/// browser over HTTP/1.1 would stop at six connections): every request answered,
/// every stream opened with its `retry:` line.
#[tokio::test]
async fn many_streams_and_quote_streams_share_one_h2_connection() {
    let env = support::start_with(|_| {}, |_| {}, Some(support::saturday())).await;
    let tcp = tokio::net::TcpStream::connect(env.proxy.addr)
        .await
        .unwrap();
    let send = h2_over(tcp).await;
    let mut streams = Vec::new();
    for _ in 0..8 {
        let send = send.clone();
        streams.push(tokio::spawn(async move { fetch(&send, STREAM, 1).await }));
    }
    let mut requests = Vec::new();
    for i in 0..40 {
        let send = send.clone();
        let path = if i % 2 == 0 {
            "/api/v1/market/indices"
        } else {
            "/api/v1/stock/detail/600519"
        };
        requests.push(tokio::spawn(
            async move { fetch(&send, path, usize::MAX).await },
        ));
    }
    for r in requests {
        let (status, body) = tokio::time::timeout(Duration::from_secs(20), r)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(status, 200);
        assert!(body.starts_with(b"{"), "{}", String::from_utf8_lossy(&body));
    }
    for s in streams {
        let (status, first) = tokio::time::timeout(Duration::from_secs(20), s)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(status, 200);
        assert!(
            first.starts_with(b"retry:"),
            "{}",
            String::from_utf8_lossy(&first)
        );
    }
}

/// An h2 connection to `addr` with `n` quote streams open on it (each answered
/// 200): their bodies and their sending halves, and the connection's driver task.
async fn quote_streams_on_one_connection(
    addr: std::net::SocketAddr,
    n: usize,
) -> (
    Vec<(h2::RecvStream, h2::SendStream<Bytes>)>,
    h2::client::SendRequest<Bytes>,
    tokio::task::JoinHandle<Result<(), h2::Error>>,
) {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (send, connection) = h2::client::handshake(tcp).await.unwrap();
    let connection = tokio::spawn(connection);
    let mut streams = Vec::new();
    for _ in 0..n {
        let mut ready = send.clone().ready().await.unwrap();
        let (response, outgoing) = ready.send_request(get(STREAM), true).unwrap();
        let response = tokio::time::timeout(Duration::from_secs(20), response)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(response.status(), 200);
        streams.push((response.into_body(), outgoing));
    }
    (streams, send, connection)
}

/// A graceful shutdown with quote streams open on an HTTP/2 connection: `shutdown()`
/// returns within the grace, every stream ends (its body finishes or the
/// connection goes), and the connection itself ends, on the client's side too. The
/// streams run in their connection's task (`edge/streams.rs`), so none may be left
/// running when the connection is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_ends_quote_streams_and_their_h2_connection() {
    let env = support::start_with(
        |_| {},
        |c| c.server.shutdown_grace_ms = 1_000,
        Some(support::saturday()),
    )
    .await;
    let (streams, _send, connection) = quote_streams_on_one_connection(env.proxy.addr, 3).await;
    let mut bodies = Vec::new();
    for (mut body, _) in streams {
        let first = tokio::time::timeout(Duration::from_secs(20), body.data())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert!(first.starts_with(b"retry:"), "{first:?}");
        let _ = body.flow_control().release_capacity(first.len());
        bodies.push(body);
    }
    let support::Env {
        sim: _sim, proxy, ..
    } = env;
    tokio::time::timeout(Duration::from_secs(10), proxy.shutdown())
        .await
        .expect("shutdown returns within its grace");
    for mut body in bodies {
        let mut chunks = 0;
        let ended = tokio::time::timeout(Duration::from_secs(10), async {
            // Bounded: a stream that went on would hit the timeout.
            while let Some(Ok(chunk)) = body.data().await {
                let _ = body.flow_control().release_capacity(chunk.len());
                chunks += 1;
            }
        })
        .await;
        assert!(
            ended.is_ok(),
            "the stream ended ({chunks} chunks after shutdown)"
        );
    }
    tokio::time::timeout(Duration::from_secs(10), connection)
        .await
        .expect("the connection ends")
        .unwrap()
        .ok();
}

/// A client that resets a quote stream (`RST_STREAM`) takes it out of the hub,
/// though the stream runs in its connection's task and only runs when woken; the
/// connection's other streams go on, and closing the connection takes out the rest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_quote_stream_leaves_the_hub_and_its_neighbours_stream_on() {
    let env = support::start_with(|_| {}, |_| {}, Some(support::saturday())).await;
    let hub = env.proxy.hub();
    let (mut streams, send, connection) = quote_streams_on_one_connection(env.proxy.addr, 3).await;
    assert!(support::eventually(Duration::from_secs(10), || hub.subscribers() == 3).await);
    let (_body, mut outgoing) = streams.remove(0);
    outgoing.send_reset(h2::Reason::CANCEL);
    assert!(
        support::eventually(Duration::from_secs(10), || hub.subscribers() == 2).await,
        "the reset stream left: {}",
        hub.subscribers()
    );
    // A neighbour still gets its stream: `retry:` first.
    let (mut body, _outgoing) = streams.remove(0);
    let first = tokio::time::timeout(Duration::from_secs(20), body.data())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(first.starts_with(b"retry:"), "{first:?}");
    drop((body, streams, send));
    connection.abort();
    assert!(
        support::eventually(Duration::from_secs(10), || hub.subscribers() == 0).await,
        "the closed connection's streams left: {}",
        hub.subscribers()
    );
}

/// Defect: the hub hung up on a stalled or revoked quote stream by closing its
/// connection, which over HTTP/2 ended every other stream on it (a browser's
/// other tabs). It resets that stream alone now (`RST_STREAM`): here one stream
/// whose reader stopped (it never gives back its window) and one of a key a
/// reload revokes, beside one that reads on; the connection then still answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_or_revoked_quote_stream_is_reset_alone() {
    let (env, _ticking) = support::start_moving(|c| {
        c.hub.stall_timeout_secs = 1;
        c.auth
            .tokens
            .push(mdproxy_config::Secret::new("soon-revoked"));
    })
    .await;
    let hub = env.proxy.hub();
    let tcp = tokio::net::TcpStream::connect(env.proxy.addr)
        .await
        .unwrap();
    // Each stream may hold 1 KiB unread: a reader that stops stalls its stream.
    let (send, connection) = h2::client::Builder::new()
        .initial_window_size(1024)
        .handshake::<_, Bytes>(tcp)
        .await
        .unwrap();
    let connection = tokio::spawn(connection);
    let open = |token: &str| {
        let request = Request::get(format!("http://localhost{STREAM}"))
            .header("authorization", format!("Bearer {token}"))
            .body(())
            .unwrap();
        let send = send.clone();
        async move {
            let mut ready = send.ready().await.unwrap();
            let (response, outgoing) = ready.send_request(request, true).unwrap();
            let response = tokio::time::timeout(Duration::from_secs(20), response)
                .await
                .unwrap()
                .unwrap();
            assert_eq!(response.status(), 200);
            (response.into_body(), outgoing)
        }
    };
    let (mut reading, _a) = open(support::TOKEN).await;
    let (mut stalled, _b) = open(support::TOKEN).await;
    let (mut revoked, _c) = open("soon-revoked").await;
    assert!(support::eventually(Duration::from_secs(10), || hub.subscribers() == 3).await);
    // The stalled one's first bytes arrive; it is never read again.
    tokio::time::timeout(Duration::from_secs(20), stalled.data())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let reads = tokio::spawn(async move {
        let mut bytes = 0;
        // Bounded: the test ends it, or the stream does.
        while let Some(Ok(chunk)) = reading.data().await {
            let _ = reading.flow_control().release_capacity(chunk.len());
            bytes += chunk.len();
        }
        bytes
    });
    assert!(
        support::eventually(Duration::from_secs(20), || hub.stalled() >= 1).await,
        "the stalled stream was never dropped"
    );
    let mut config = (*env.proxy.state().snapshot().config).clone();
    config.auth.tokens.retain(|t| t.expose() != "soon-revoked");
    env.proxy.reload(config).unwrap();
    let ended = tokio::time::timeout(Duration::from_secs(20), async {
        while let Some(Ok(chunk)) = revoked.data().await {
            let _ = revoked.flow_control().release_capacity(chunk.len());
        }
    });
    ended.await.expect("the revoked key's stream ends");
    assert!(
        support::eventually(Duration::from_secs(10), || hub.subscribers() == 1).await,
        "the stalled and the revoked streams left: {}",
        hub.subscribers()
    );
    // The connection is still there: it answers, and its reader reads on.
    let (status, _) = fetch(&send, "/api/v1/market/indices", usize::MAX).await;
    assert_eq!(status, 200);
    assert!(!reads.is_finished(), "the reading stream goes on");
    assert!(!connection.is_finished());
    reads.abort();
}

/// TLS with a certificate made here: h2 by ALPN for a client that offers it,
/// HTTP/1.1 for one that does not; plain HTTP on the TLS port is not answered.
#[tokio::test]
async fn tls_serves_h2_and_http1_by_alpn() {
    let (cert, key, _) = certificate();
    let files = TlsFiles::new("alpn", &cert, &key);
    let env = tls_env(&files).await;
    let url = format!(
        "https://localhost:{}/api/v1/market/indices",
        env.proxy.addr.port()
    );
    let root = reqwest::Certificate::from_pem(cert.as_bytes()).unwrap();
    let client = |h1: bool| {
        let b = reqwest::Client::builder()
            .no_proxy()
            .resolve("localhost", env.proxy.addr)
            .add_root_certificate(root.clone());
        if h1 { b.http1_only() } else { b }.build().unwrap()
    };
    let r = client(false)
        .get(&url)
        .bearer_auth(support::TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!((r.status().as_u16(), r.version()), (200, Version::HTTP_2));
    let r = client(true)
        .get(&url)
        .bearer_auth(support::TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!((r.status().as_u16(), r.version()), (200, Version::HTTP_11));
    let plain = support::client()
        .get(format!(
            "http://127.0.0.1:{}/api/v1/market/indices",
            env.proxy.addr.port()
        ))
        .bearer_auth(support::TOKEN)
        .timeout(Duration::from_secs(15))
        .send()
        .await;
    assert!(plain.is_err(), "no plain HTTP on the TLS listener");
}

/// The leaf certificate a TLS handshake with the proxy presents.
async fn served_certificate(addr: std::net::SocketAddr, roots: &[&[u8]]) -> Vec<u8> {
    let mut store = rustls::RootCertStore::empty();
    for der in roots {
        store
            .add(rustls_pki_types::CertificateDer::from(der.to_vec()))
            .unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(store)
    .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
    let tls = connector.connect(name, tcp).await.unwrap();
    tls.get_ref().1.peer_certificates().unwrap()[0].to_vec()
}

/// A renewed certificate is served without a restart: on reload, and when the files
/// change under a running proxy (polled); a broken pair is refused and the running
/// one stays.
#[tokio::test]
async fn the_certificate_is_reloaded_without_a_restart() {
    let (cert_a, key_a, der_a) = certificate();
    let (cert_b, key_b, der_b) = certificate();
    let (cert_c, key_c, der_c) = certificate();
    let files = TlsFiles::new("reload", &cert_a, &key_a);
    let env = tls_env(&files).await;
    let roots = [&der_a[..], &der_b[..], &der_c[..]];
    assert_eq!(served_certificate(env.proxy.addr, &roots).await, der_a);

    files.write(&cert_b, &key_b);
    let config = (*env.proxy.state().snapshot().config).clone();
    env.proxy.reload(config.clone()).unwrap();
    assert_eq!(served_certificate(env.proxy.addr, &roots).await, der_b);

    files.write("not a certificate", &key_b);
    assert!(
        env.proxy.reload(config.clone()).is_err(),
        "a broken pair refuses the reload"
    );
    assert_eq!(served_certificate(env.proxy.addr, &roots).await, der_b);

    // Defect: a good pair at other paths was put in use before the rest of the
    // reload was refused (here, an upstream token no header can carry: a line break), and the
    // refused reload left it served and watched.
    let other = TlsFiles::new("reload-other", &cert_c, &key_c);
    let mut refused = config.clone();
    refused.server.tls_cert = other.cert.display().to_string();
    refused.server.tls_key = other.key.display().to_string();
    refused.upstream.token = mdproxy_config::Secret::new("k\ny");
    assert!(env.proxy.reload(refused).is_err());
    assert_eq!(
        served_certificate(env.proxy.addr, &roots).await,
        der_b,
        "a refused reload changes no certificate"
    );

    // Renewed in place (cert-manager, certbot): the poller finds it.
    files.write(&cert_c, &key_c);
    let mut served = Vec::new();
    for _ in 0..100 {
        served = served_certificate(env.proxy.addr, &roots).await;
        if served == der_c {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(served, der_c, "the renewed files were picked up");
}

/// A connection that says nothing at all is closed after the header read timeout,
/// as one that sends half a request head is (the protocol sniffing waits no longer);
/// so is one that sends the start of HTTP/2's preface and stops (it was handed to
/// hyper-util's detection, which waits without a timer), and an HTTP/2 connection
/// that opens no stream (hyper keeps those for ever): each would hold its slot.
#[tokio::test]
async fn a_silent_connection_is_closed_after_the_header_timeout() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let env = support::start_with(
        |_| {},
        |c| c.server.header_read_timeout_ms = 300,
        Some(support::saturday()),
    )
    .await;
    let preface_and_settings = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0";
    for opening in [&b""[..], b"PRI", preface_and_settings] {
        let mut tcp = tokio::net::TcpStream::connect(env.proxy.addr)
            .await
            .unwrap();
        tcp.write_all(opening).await.unwrap();
        // Whatever the server says (HTTP/2's SETTINGS), then the end.
        let read_all = async {
            let mut buf = [0u8; 256];
            loop {
                match tcp.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
            }
        };
        let closed = tokio::time::timeout(Duration::from_secs(10), read_all).await;
        assert!(
            closed.is_ok(),
            "{:?}: closed, not left open",
            String::from_utf8_lossy(opening)
        );
    }
}

/// Past the connection limit a TLS listener refuses in TLS: the handshake completes
/// and the client reads `503 overloaded` in the envelope, over h2 or HTTP/1.1 as ALPN
/// chose. (It used to write a plain-text `HTTP/1.1 503` before any handshake, which a
/// TLS client reads as garbage.)
#[tokio::test]
async fn past_the_limit_a_tls_listener_refuses_in_tls() {
    let (cert, key, der) = certificate();
    let files = TlsFiles::new("refusal", &cert, &key);
    let (cert_path, key_path) = (
        files.cert.display().to_string(),
        files.key.display().to_string(),
    );
    let env = support::start_with(
        |_| {},
        |c| {
            c.server.tls_cert = cert_path;
            c.server.tls_key = key_path;
            c.server.max_connections = 1;
        },
        Some(support::saturday()),
    )
    .await;
    // The one connection the listener admits, held open. (Opened first: a
    // connection closed just before it would hold the slot until its serving
    // thread saw it go.)
    let held = {
        let mut store = rustls::RootCertStore::empty();
        store
            .add(rustls_pki_types::CertificateDer::from(der.clone()))
            .unwrap();
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(store)
        .with_no_client_auth();
        let tcp = tokio::net::TcpStream::connect(env.proxy.addr)
            .await
            .unwrap();
        let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
        tokio_rustls::TlsConnector::from(Arc::new(config))
            .connect(name, tcp)
            .await
            .unwrap()
    };
    // Refused, yet in TLS: the handshake completes with the certificate.
    assert_eq!(served_certificate(env.proxy.addr, &[&der]).await, der);
    let root = reqwest::Certificate::from_pem(cert.as_bytes()).unwrap();
    for h1 in [true, false] {
        let builder = reqwest::Client::builder()
            .no_proxy()
            .resolve("localhost", env.proxy.addr)
            .add_root_certificate(root.clone());
        let client = if h1 { builder.http1_only() } else { builder }
            .build()
            .unwrap();
        let r = client
            .get(format!(
                "https://localhost:{}/api/v1/market/indices",
                env.proxy.addr.port()
            ))
            .bearer_auth(support::TOKEN)
            .send()
            .await
            .expect("an answer in TLS, not garbage");
        let expected = if h1 {
            Version::HTTP_11
        } else {
            Version::HTTP_2
        };
        assert_eq!(r.version(), expected);
        assert_eq!(support::header(&r, "retry-after"), "1");
        let (status, code, _) = support::error_of(r).await;
        assert_eq!((status, code.as_str()), (503, "overloaded"));
    }
    drop(held);
}

/// `mdproxy serve` with a certificate announces its listener as `https://`, and the
/// address it prints answers over TLS.
#[tokio::test]
async fn serve_announces_a_tls_listener_as_https() {
    use tokio::io::AsyncBufReadExt;
    let (cert, key, _) = certificate();
    let files = TlsFiles::new("banner", &cert, &key);
    let sim = support::sim_with_token("banner-upstream").await;
    let config = files.dir.join("serve.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\ntls_cert = {:?}\ntls_key = {:?}\n[auth]\ntokens = [\"{}\"]\n[upstream]\nbase_url = \"{}\"\ntoken = \"banner-upstream\"\n[scheduler]\nenabled = false\n",
            files.cert.display().to_string(),
            files.key.display().to_string(),
            support::TOKEN,
            sim.base_url()
        ),
    )
    .unwrap();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_mdproxy"))
        .args(["serve", "--log", "warn", "--config"])
        .arg(&config)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let base = tokio::time::timeout(Duration::from_secs(20), async {
        while let Ok(Some(line)) = lines.next_line().await {
            if let Some(rest) = line.strip_prefix("mdproxy serving ") {
                return rest.split_whitespace().next().unwrap().to_owned();
            }
        }
        panic!("serve ended before serving");
    })
    .await
    .expect("serve came up");
    let addr: std::net::SocketAddr = base
        .strip_prefix("https://")
        .unwrap_or_else(|| panic!("{base} is announced as https"))
        .trim_end_matches("/api/v1")
        .parse()
        .unwrap();
    let client = reqwest::Client::builder()
        .no_proxy()
        .resolve("localhost", addr)
        .add_root_certificate(reqwest::Certificate::from_pem(cert.as_bytes()).unwrap())
        .build()
        .unwrap();
    let r = client
        .get(format!(
            "https://localhost:{}/api/v1/market/indices",
            addr.port()
        ))
        .bearer_auth(support::TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    child.kill().await.unwrap();
}

/// `server.h2_ping_secs` has a client with a stream open pinged after that much
/// silence; by default no client is (as nginx: each round of pings was followed by
/// the quote stream's worst ticks, docs/deployment.md).
#[tokio::test]
async fn a_silent_h2_client_is_pinged_only_when_asked() {
    use tokio::io::AsyncWriteExt;
    for (ping_secs, pinged) in [(1, true), (0, false)] {
        let env = support::start_with(
            |_| {},
            |c| c.server.h2_ping_secs = ping_secs,
            Some(support::saturday()),
        )
        .await;
        let mut tcp = tokio::net::TcpStream::connect(env.proxy.addr)
            .await
            .unwrap();
        tcp.write_all(&raw_h2_opening(STREAM)).await.unwrap();
        let seen = raw_h2_ping_within(&mut tcp, Duration::from_millis(2_500)).await;
        assert_eq!(seen, pinged, "h2_ping_secs = {ping_secs}");
    }
}

/// The client preface, empty SETTINGS, and a GET of `path` on stream 1 with the
/// token (HPACK literals, no table), sent by hand: an h2 client library answers
/// the server's PINGs without telling its caller.
fn raw_h2_opening(path: &str) -> Vec<u8> {
    fn frame(out: &mut Vec<u8>, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
        out.extend_from_slice(&u32::try_from(payload.len()).unwrap().to_be_bytes()[1..]);
        out.extend_from_slice(&[kind, flags]);
        out.extend_from_slice(&stream.to_be_bytes());
        out.extend_from_slice(payload);
    }
    fn string(out: &mut Vec<u8>, text: &str) {
        out.push(u8::try_from(text.len()).expect("under 127 bytes"));
        out.extend_from_slice(text.as_bytes());
    }
    // :method GET and :scheme http from the static table; :path (4) and
    // :authority (1) by their names' indexes; authorization by name.
    let mut block = vec![0x82, 0x86, 0x04];
    string(&mut block, path);
    block.push(0x01);
    string(&mut block, "localhost");
    block.push(0x00);
    string(&mut block, "authorization");
    string(&mut block, &format!("Bearer {}", support::TOKEN));
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    frame(&mut out, 0x4, 0, 0, &[]);
    // END_STREAM | END_HEADERS.
    frame(&mut out, 0x1, 0x5, 1, &block);
    out
}

/// Whether the server sends a PING within `within`, reading (and acknowledging
/// its SETTINGS) until then.
async fn raw_h2_ping_within(tcp: &mut tokio::net::TcpStream, within: Duration) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let read = async {
        loop {
            let mut head = [0u8; 9];
            tcp.read_exact(&mut head)
                .await
                .expect("the connection stays open");
            let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
            let mut payload = vec![0u8; len];
            tcp.read_exact(&mut payload).await.unwrap();
            let (kind, ack) = (head[3], head[4] & 0x1 == 0x1);
            match kind {
                0x4 if !ack => tcp
                    .write_all(&[0, 0, 0, 0x4, 0x1, 0, 0, 0, 0])
                    .await
                    .unwrap(),
                0x6 if !ack => return,
                0x3 | 0x7 => panic!("stream reset or connection closed: frame {kind}"),
                _ => {}
            }
        }
    };
    tokio::time::timeout(within, read).await.is_ok()
}

/// A stateless MCP `tools/call` of `get_market_indices` (the 2026-07-28 revision),
/// its body announced by `content-length` and sent apart from its head.
fn mcp_call(length: usize) -> Request<()> {
    Request::post("http://localhost/mcp")
        .header("x-api-key", support::TOKEN)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("content-length", length)
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", "get_market_indices")
        .body(())
        .unwrap()
}

fn mcp_call_body(id: u64) -> Bytes {
    Bytes::from(
        serde_json::json!({
            "jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "get_market_indices", "arguments": {}, "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientInfo": {"name": "h2", "version": "1"},
                "io.modelcontextprotocol/clientCapabilities": {}
            }}
        })
        .to_string(),
    )
}

/// Status and body of a response on an h2 stream, within 20 s.
async fn answer(response: h2::client::ResponseFuture) -> (u16, String) {
    let within = Duration::from_secs(20);
    let response = tokio::time::timeout(within, response)
        .await
        .expect("answered")
        .unwrap();
    let status = response.status().as_u16();
    let mut body = response.into_body();
    let mut bytes = Vec::new();
    while let Some(chunk) = tokio::time::timeout(within, body.data()).await.unwrap() {
        let chunk = chunk.unwrap();
        let _ = body.flow_control().release_capacity(chunk.len());
        bytes.extend_from_slice(&chunk);
    }
    (status, String::from_utf8_lossy(&bytes).into_owned())
}

/// Request bodies through an HTTP/2 connection's shared task (`edge/streams.rs`):
/// a tool call whose body stops half-way holds none of the streams beside it (a GET
/// and a whole call sent after it are answered first), then is answered once the
/// rest comes, in DATA frames of a few bytes; a body longer than its
/// `content-length` and one past the endpoint's limit are refused on their own
/// streams, and the connection serves on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_bodies_on_one_h2_connection_wait_alone() {
    let env =
        support::start_with(|_| {}, |c| c.mcp.enabled = true, Some(support::saturday())).await;
    let tcp = tokio::net::TcpStream::connect(env.proxy.addr)
        .await
        .unwrap();
    let send = h2_over(tcp).await;
    let body = mcp_call_body(7);
    let mut ready = send.clone().ready().await.unwrap();
    let (stalled, mut outgoing) = ready.send_request(mcp_call(body.len()), false).unwrap();
    let half = body.len() / 2;
    outgoing.send_data(body.slice(..half), false).unwrap();

    let (status, got) = fetch(&send, "/api/v1/market/indices", usize::MAX).await;
    assert_eq!(status, 200, "a GET beside a stalled body");
    assert!(got.starts_with(b"{"));
    let whole = mcp_call_body(8);
    let mut ready = send.clone().ready().await.unwrap();
    let (response, mut other) = ready.send_request(mcp_call(whole.len()), false).unwrap();
    other.send_data(whole, true).unwrap();
    let (status, said) = answer(response).await;
    assert_eq!(status, 200, "{said}");
    assert!(
        said.contains("\"id\":8") && said.contains("\"result\""),
        "{said}"
    );

    let rest = body.slice(half..);
    for start in (0..rest.len()).step_by(5) {
        let end = (start + 5).min(rest.len());
        outgoing
            .send_data(rest.slice(start..end), end == rest.len())
            .unwrap();
    }
    let (status, said) = answer(stalled).await;
    assert_eq!(status, 200, "{said}");
    assert!(
        said.contains("\"id\":7") && said.contains("\"result\""),
        "{said}"
    );

    // More bytes than announced: h2 resets that stream alone.
    let mut ready = send.clone().ready().await.unwrap();
    let (response, mut over) = ready.send_request(mcp_call(10), false).unwrap();
    let _ = over.send_data(mcp_call_body(9), true);
    let refused = tokio::time::timeout(Duration::from_secs(20), response)
        .await
        .expect("refused in time");
    assert!(
        refused.is_err(),
        "a body past its content-length is refused"
    );

    // Past the endpoint's limit (not a direct call: rmcp reads it and refuses it).
    let large = vec![b' '; mdproxy_core::mcp::MAX_MESSAGE + 1];
    let request = Request::post("http://localhost/mcp")
        .header("x-api-key", support::TOKEN)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("mcp-protocol-version", "2025-06-18")
        .body(())
        .unwrap();
    let mut ready = send.clone().ready().await.unwrap();
    let (response, mut too_large) = ready.send_request(request, false).unwrap();
    let _ = too_large.send_data(Bytes::from(large), true);
    let (status, said) = answer(response).await;
    assert_eq!(status, 413, "{said}");
    assert!(said.contains("262144 bytes"), "the limit named: {said}");

    let (status, _) = fetch(&send, "/api/v1/market/indices", usize::MAX).await;
    assert_eq!(status, 200, "the connection serves on");
}
