//! The bare HTTP/1.1 loop (`server.bare_http1`) over raw sockets: plain `GET`s
//! answered in order on one kept-alive connection, pipelined or cut in pieces; a
//! 304's framing; the hand-over to hyper of the first request of another kind, and
//! of heads hyper refuses; the close a client asks for, and the idle timeout.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support;

/// How long any read here waits before the test fails.
const PATIENCE: Duration = Duration::from_secs(10);

/// One answer read off a connection.
#[derive(Debug)]
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Answer {
    fn all(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
            .collect()
    }

    fn one(&self, name: &str) -> Option<&str> {
        let all = self.all(name);
        assert!(all.len() <= 1, "{name} once at most: {:?}", self.headers);
        all.first().copied()
    }
}

/// A client connection that reads answers one at a time, framed by their
/// `content-length` (none for a 304 or an answer to HEAD).
struct Conn {
    socket: TcpStream,
    read: Vec<u8>,
}

impl Conn {
    async fn open(env: &support::Env) -> Conn {
        let socket = TcpStream::connect(env.proxy.addr).await.unwrap();
        socket.set_nodelay(true).unwrap();
        Conn {
            socket,
            read: Vec::new(),
        }
    }

    async fn send(&mut self, bytes: &[u8]) {
        self.socket.write_all(bytes).await.unwrap();
    }

    /// Reads more; `false` at the end of the connection.
    async fn fill(&mut self) -> bool {
        let mut chunk = [0u8; 8192];
        let n = tokio::time::timeout(PATIENCE, self.socket.read(&mut chunk))
            .await
            .expect("the server answers or closes in time")
            .unwrap_or(0);
        self.read.extend_from_slice(&chunk[..n]);
        n > 0
    }

    async fn answer(&mut self, to_head: bool) -> Answer {
        loop {
            let mut headers = [httparse::EMPTY_HEADER; 64];
            let mut parsed = httparse::Response::new(&mut headers);
            if let httparse::Status::Complete(len) = parsed.parse(&self.read).unwrap() {
                let status = parsed.code.unwrap();
                let headers: Vec<(String, String)> = parsed
                    .headers
                    .iter()
                    .map(|h| {
                        let value = String::from_utf8(h.value.to_vec()).unwrap();
                        (h.name.to_ascii_lowercase(), value)
                    })
                    .collect();
                let length = headers
                    .iter()
                    .find(|(n, _)| n == "content-length")
                    .map_or(0, |(_, v)| v.parse::<usize>().unwrap());
                let length = if to_head || status == 304 { 0 } else { length };
                while self.read.len() < len + length {
                    assert!(self.fill().await, "the body came whole");
                }
                let body = self.read[len..len + length].to_vec();
                self.read.drain(..len + length);
                return Answer {
                    status,
                    headers,
                    body,
                };
            }
            assert!(
                self.fill().await,
                "an answer before the end: {:?}",
                self.read
            );
        }
    }

    /// Whether the server closed the connection (nothing more comes).
    async fn closed(&mut self) -> bool {
        !self.fill().await && self.read.is_empty()
    }
}

/// A `GET` head of `target` under the API prefix with the test token.
fn get(target: &str, extra: &str) -> String {
    format!(
        "GET /api/v1{target} HTTP/1.1\r\nHost: mdproxy\r\nAuthorization: Bearer {}\r\n{extra}\r\n",
        support::TOKEN
    )
}

fn is_envelope(answer: &Answer) -> bool {
    let v: serde_json::Value = serde_json::from_slice(&answer.body).unwrap();
    v["success"] == true
}

/// Three pipelined `GET`s are answered in order, each with one `date` and a length
/// that frames it, the connection kept; a `Connection: close` is answered with it
/// and the connection closed. The same with the loop switched off (hyper).
#[tokio::test]
async fn pipelined_gets_are_answered_in_order_on_one_connection() {
    for bare in [true, false] {
        let env = support::start_with(|_| {}, |c| c.server.bare_http1 = bare, None).await;
        let mut conn = Conn::open(&env).await;
        let targets = ["/market/indices", "/stock/detail/600519", "/market/indices"];
        let heads: String = targets.iter().map(|t| get(t, "")).collect();
        conn.send(heads.as_bytes()).await;
        for target in targets {
            let answer = conn.answer(false).await;
            assert_eq!(answer.status, 200, "{target} ({bare})");
            assert!(is_envelope(&answer), "{target}");
            assert_eq!(answer.all("date").len(), 1);
            assert_eq!(answer.one("connection"), None, "kept alive");
            assert_eq!(
                answer.one("content-length"),
                Some(answer.body.len().to_string().as_str())
            );
        }
        conn.send(get("/market/indices", "Connection: close\r\n").as_bytes())
            .await;
        let last = conn.answer(false).await;
        assert_eq!(last.status, 200);
        assert_eq!(last.one("connection"), Some("close"));
        assert!(conn.closed().await, "closed after the answer ({bare})");
    }
}

/// A head that arrives a few bytes at a time is read whole and answered.
#[tokio::test]
async fn a_head_cut_into_pieces_is_answered() {
    let env = support::start().await;
    let mut conn = Conn::open(&env).await;
    let head = get("/market/indices", "X-Request-Id: cut-in-pieces\r\n");
    for piece in head.as_bytes().chunks(7) {
        conn.send(piece).await;
        tokio::task::yield_now().await;
    }
    let answer = conn.answer(false).await;
    assert_eq!(answer.status, 200);
    assert_eq!(answer.one("x-request-id"), Some("cut-in-pieces"));
}

/// The first request of another kind (HEAD) goes to hyper with what followed it,
/// and so does the rest of the connection: every answer in order, framed right.
#[tokio::test]
async fn another_kind_of_request_hands_the_connection_to_hyper() {
    let env = support::start().await;
    let mut conn = Conn::open(&env).await;
    conn.send(get("/market/indices", "").as_bytes()).await;
    let first = conn.answer(false).await;
    assert_eq!(first.status, 200);
    let head = get("/market/indices", "").replacen("GET", "HEAD", 1);
    let then = get("/stock/detail/600519", "");
    conn.send(format!("{head}{then}").as_bytes()).await;
    let to_head = conn.answer(true).await;
    assert_eq!(to_head.status, 200);
    assert_eq!(
        to_head.one("content-length"),
        Some(first.body.len().to_string().as_str()),
        "HEAD gets GET's length"
    );
    let after = conn.answer(false).await;
    assert_eq!(after.status, 200);
    assert!(is_envelope(&after));
}

/// A 304 goes out without a length or a body, and the connection goes on.
#[tokio::test]
async fn a_304_has_no_length_and_the_connection_goes_on() {
    let env = support::start().await;
    let mut conn = Conn::open(&env).await;
    conn.send(get("/market/indices", "").as_bytes()).await;
    let first = conn.answer(false).await;
    let etag = first.one("etag").expect("an ETag").to_owned();
    conn.send(get("/market/indices", &format!("If-None-Match: {etag}\r\n")).as_bytes())
        .await;
    let not_modified = conn.answer(false).await;
    assert_eq!(not_modified.status, 304);
    assert_eq!(not_modified.one("content-length"), None);
    assert_eq!(not_modified.one("etag"), Some(etag.as_str()));
    conn.send(get("/market/indices", "").as_bytes()).await;
    let again = conn.answer(false).await;
    assert_eq!(again.status, 200);
    assert_eq!(again.body, first.body);
}

/// Heads the loop does not take are hyper's to refuse, as they always were: one
/// past `server.max_header_bytes` (431) and one that does not parse (400).
#[tokio::test]
async fn heads_hyper_refuses_are_refused() {
    let env = support::start().await;
    let mut conn = Conn::open(&env).await;
    let long = format!("X-Long: {}\r\n", "y".repeat(20 * 1024));
    conn.send(get("/market/indices", &long).as_bytes()).await;
    assert_eq!(conn.answer(false).await.status, 431);

    let mut conn = Conn::open(&env).await;
    conn.send(b"GET /api/v1/market/indices HTTP/1.1\r\nNo Colon Here\r\n\r\n")
        .await;
    assert_eq!(conn.answer(false).await.status, 400);
}

/// A kept-alive connection that asks nothing more is closed after
/// `server.header_read_timeout_ms`.
#[tokio::test]
async fn an_idle_kept_connection_is_closed_after_the_header_read_timeout() {
    let env = support::start_with(
        |_| {},
        |c| c.server.header_read_timeout_ms = 300,
        Some(support::saturday()),
    )
    .await;
    let mut conn = Conn::open(&env).await;
    conn.send(get("/market/indices", "").as_bytes()).await;
    assert_eq!(conn.answer(false).await.status, 200);
    assert!(conn.closed().await, "closed by the server");
}

/// The wait for a head is bounded by the connection's one timer, which an earlier
/// wait armed and which moves on when it fires early: a connection whose requests
/// come closer together than the timeout outlives it (here by more than a third
/// of it), and one that sends half a head is still closed.
#[tokio::test]
async fn a_connection_asked_within_the_header_read_timeout_outlives_it() {
    let env = support::start_with(
        |_| {},
        |c| c.server.header_read_timeout_ms = 600,
        Some(support::saturday()),
    )
    .await;
    let mut conn = Conn::open(&env).await;
    for _ in 0..4 {
        conn.send(get("/market/indices", "").as_bytes()).await;
        assert_eq!(conn.answer(false).await.status, 200, "still open");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    conn.send(b"GET /api/v1/market/indices HTTP/1.1\r\nHost: mdp")
        .await;
    assert!(conn.closed().await, "closed with its head half sent");
}

/// A kept connection waiting for its next request ends as soon as the listener
/// drains: the drain wakes it, long before its header read timeout would.
#[tokio::test]
async fn a_kept_connection_ends_when_the_listener_drains() {
    let env = support::start_with(
        |_| {},
        |c| {
            c.server.header_read_timeout_ms = 120_000;
            c.server.shutdown_grace_ms = 120_000;
        },
        Some(support::saturday()),
    )
    .await;
    let mut conn = Conn::open(&env).await;
    conn.send(get("/market/indices", "").as_bytes()).await;
    assert_eq!(conn.answer(false).await.status, 200);
    let support::Env {
        sim: _sim, proxy, ..
    } = env;
    tokio::time::timeout(PATIENCE, proxy.shutdown())
        .await
        .expect("the drain does not wait for the kept connection");
    assert!(conn.closed().await, "closed by the drain");
}
