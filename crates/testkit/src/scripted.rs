//! A hand-written upstream for faults the simulator does not make: each request is
//! answered with the next scripted response, as late as asked.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

pub struct Scripted {
    pub addr: SocketAddr,
    /// Each answer, and how long to hold it back.
    script: Arc<Mutex<VecDeque<(Duration, String)>>>,
    received: Arc<AtomicU64>,
}

impl Scripted {
    pub async fn start() -> Scripted {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let script = Arc::new(Mutex::new(VecDeque::<(Duration, String)>::new()));
        let received = Arc::new(AtomicU64::new(0));
        let (s, r) = (script.clone(), received.clone());
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let (script, received) = (s.clone(), r.clone());
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut buf = [0u8; 4096];
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                        match socket.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => head.extend_from_slice(&buf[..n]),
                        }
                    }
                    received.fetch_add(1, Ordering::SeqCst);
                    let (late, response) =
                        script.lock().unwrap().pop_front().unwrap_or_else(|| {
                            (
                                Duration::ZERO,
                                response("500 Internal Server Error", &[], "{}"),
                            )
                        });
                    tokio::time::sleep(late).await;
                    let _ = socket.write_all(response.as_bytes()).await;
                    let _ = socket.shutdown().await;
                });
            }
        });
        Scripted {
            addr,
            script,
            received,
        }
    }

    /// Answers a coming request with `response` (in order).
    pub fn then(&self, response: String) {
        self.then_late(Duration::ZERO, response);
    }

    /// Answers a coming request with `response`, `late` after it arrived.
    pub fn then_late(&self, late: Duration, response: String) {
        self.script.lock().unwrap().push_back((late, response));
    }

    /// Requests received so far.
    pub fn received(&self) -> u64 {
        self.received.load(Ordering::SeqCst)
    }
}

/// An HTTP/1.1 response with `Connection: close`.
pub fn response(status: &str, headers: &[(&str, &str)], body: &str) -> String {
    let mut out = format!(
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (k, v) in headers {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    out.push_str("\r\n");
    out.push_str(body);
    out
}
