//! HTTP for tests: a loopback client, a response's headers, raw exchanges that show
//! exactly the bytes a server sent, and JSON or text from a URL.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// An HTTP client for loopback tests (no system proxy, bounded waits).
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(30))
        .pool_max_idle_per_host(256)
        .build()
        .unwrap()
}

/// Every value of a response's header, in order (one per header line).
pub fn headers(r: &reqwest::Response, name: &str) -> Vec<String> {
    r.headers()
        .get_all(name)
        .iter()
        .map(|v| v.to_str().unwrap().to_owned())
        .collect()
}

/// A response's header as a string ("" when absent). Only the first value: use
/// [`headers`] where a header may come more than once (`Vary`).
pub fn header(r: &reqwest::Response, name: &str) -> String {
    r.headers()
        .get(name)
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default()
}

/// A response read off a raw TCP connection: exactly the bytes the server sent.
#[derive(Debug)]
pub struct RawResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    /// Everything after the header block, up to the server closing the connection.
    pub body: Vec<u8>,
}

impl RawResponse {
    /// The first value of a header (names compare case-insensitively).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Every value of `name` (a header may come on several lines).
    pub fn all(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .collect()
    }

    /// The only value of `name`; fails when it is given more than once.
    pub fn one(&self, name: &str) -> Option<&str> {
        let all = self.all(name);
        assert!(all.len() <= 1, "{name} given {} times", all.len());
        all.first().copied()
    }

    /// Whether any `Vary` line lists `field`.
    pub fn varies_on(&self, field: &str) -> bool {
        self.all("vary")
            .iter()
            .flat_map(|v| v.split(','))
            .any(|f| f.trim().eq_ignore_ascii_case(field))
    }
}

/// Sends `method target` (a path with query) over a fresh connection with
/// `Connection: close` and reads until the server closes it, so any byte sent after
/// the headers shows up in `body` (an HTTP client would not read a HEAD or 304 body).
pub async fn raw_request(
    addr: std::net::SocketAddr,
    method: &str,
    target: &str,
    extra: &[(&str, &str)],
) -> RawResponse {
    let mut request =
        format!("{method} {target} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (k, v) in extra {
        request.push_str(&format!("{k}: {v}\r\n"));
    }
    request.push_str("\r\n");
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut bytes = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut bytes))
        .await
        .expect("the server closes a Connection: close exchange")
        .unwrap();
    let split = bytes
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a complete header block");
    let head = std::str::from_utf8(&bytes[..split]).unwrap();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers = lines
        .map(|l| {
            let (k, v) = l.split_once(':').unwrap();
            (k.trim().to_owned(), v.trim().to_owned())
        })
        .collect();
    RawResponse {
        status,
        headers,
        body: bytes[split + 4..].to_vec(),
    }
}

/// The JSON document at `url` (`/status.json`, the simulator's stats), asked
/// without a token.
pub async fn json(url: &str) -> serde_json::Value {
    client()
        .get(url)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// The body at `url` (an admin address, say) as text, asked without a token.
pub async fn text(url: &str) -> String {
    client()
        .get(url)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// GET `url` with `key` as a bearer token: the status and the JSON body.
pub async fn get_json(client: &reqwest::Client, url: &str, key: &str) -> (u16, serde_json::Value) {
    let r = client.get(url).bearer_auth(key).send().await.unwrap();
    (r.status().as_u16(), r.json().await.unwrap())
}
