//! Sessions opened here, by the client key that opened each: at most [`PER_CLIENT`]
//! open for one key and [`IN_ALL`] in all, so that one agent opening sessions
//! without closing them (each holds a server and its `initialize`, here and in the
//! fleet's store) cannot fill the node; and a session is its opener's alone, on
//! this node by the key's identity here, across the fleet by a [`digest`] of the
//! key kept beside the session. A session is counted until rmcp lets it go (closed
//! with `DELETE`, or idle).

use std::collections::HashMap;
use std::sync::Mutex;

use bytes::Bytes;
use http::{Response, StatusCode, header};
use mdproxy_config::Secret;

/// Open sessions one client key may have.
pub const PER_CLIENT: usize = 100;
/// Open sessions in all.
pub const IN_ALL: usize = 10_000;
/// What a refused client is told to wait, in seconds.
const RETRY_SECS: u64 = 60;

/// The sessions opened here, by ID: the client that opened each.
#[derive(Debug, Default)]
pub struct Opened {
    by_id: Mutex<HashMap<String, usize>>,
}

/// Which bound a new session would pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Full {
    Client,
    InAll,
}

impl Opened {
    /// Whether `client` may open one more session; `live` says whether a session
    /// counted is still open (those that are not are forgotten).
    ///
    /// # Errors
    /// The bound it would pass.
    pub fn may_open(&self, client: usize, live: impl Fn(&str) -> bool) -> Result<(), Full> {
        let mut by_id = self.by_id.lock().unwrap_or_else(|e| e.into_inner());
        by_id.retain(|id, _| live(id));
        if by_id.len() >= IN_ALL {
            return Err(Full::InAll);
        }
        if by_id.values().filter(|c| **c == client).count() >= PER_CLIENT {
            return Err(Full::Client);
        }
        Ok(())
    }

    /// The client that opened session `id` here, if it did.
    pub fn owner(&self, id: &str) -> Option<usize> {
        let by_id = self.by_id.lock().unwrap_or_else(|e| e.into_inner());
        by_id.get(id).copied()
    }

    /// The sessions opened here by one of `clients`.
    pub fn of(&self, clients: &[usize]) -> Vec<String> {
        let by_id = self.by_id.lock().unwrap_or_else(|e| e.into_inner());
        by_id
            .iter()
            .filter(|(_, client)| clients.contains(client))
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// Counts the session `id` that `client` opened.
    pub fn note(&self, id: &str, client: usize) {
        let mut by_id = self.by_id.lock().unwrap_or_else(|e| e.into_inner());
        by_id.insert(id.to_owned(), client);
    }

    /// Stops counting the session `id` (noted for a restore that found nothing).
    pub fn forget(&self, id: &str) {
        let mut by_id = self.by_id.lock().unwrap_or_else(|e| e.into_inner());
        by_id.remove(id);
    }
}

/// Who opened session `id` with `key`, as the fleet keeps it: SHA-256 of both
/// (the ID first, so a digest is worth nothing for another session). Every node
/// makes the same from the same key; Redis never holds the key itself.
pub fn digest(id: &str, key: &Secret) -> Bytes {
    let mut hash = ring::digest::Context::new(&ring::digest::SHA256);
    hash.update(b"mdproxy agent session owner\0");
    hash.update(id.as_bytes());
    hash.update(b"\0");
    hash.update(key.expose().as_bytes());
    Bytes::copy_from_slice(hash.finish().as_ref())
}

/// The answer to a session ID presented by a key that did not open it: rmcp's
/// own to an unknown session.
pub fn not_found() -> Response<Bytes> {
    let mut response = Response::new(Bytes::from_static(b"Not Found: Session not found"));
    *response.status_mut() = StatusCode::NOT_FOUND;
    response
}

impl Full {
    /// The refusal: `429` for a client at its bound, `503` when the node is, with a
    /// JSON-RPC error (no id: the request was not read) and `Retry-After`.
    pub fn response(self) -> Response<Bytes> {
        let (status, message) = match self {
            Full::Client => (
                StatusCode::TOO_MANY_REQUESTS,
                format!(
                    "this key has {PER_CLIENT} sessions open: close one (DELETE) or let one expire"
                ),
            ),
            Full::InAll => (
                StatusCode::SERVICE_UNAVAILABLE,
                format!("this server has {IN_ALL} sessions open: try again later"),
            ),
        };
        let body = serde_json::json!({
            "jsonrpc": "2.0", "id": null,
            "error": {"code": -32000, "message": message}
        });
        let mut response = Response::new(Bytes::from(body.to_string()));
        *response.status_mut() = status;
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            header::HeaderValue::from_static("application/json"),
        );
        headers.insert(header::RETRY_AFTER, header::HeaderValue::from(RETRY_SECS));
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_key_and_the_node_have_their_bound() {
        let opened = Opened::default();
        for n in 0..PER_CLIENT {
            assert_eq!(opened.may_open(1, |_| true), Ok(()));
            opened.note(&format!("s{n}"), 1);
        }
        assert_eq!(opened.may_open(1, |_| true), Err(Full::Client));
        assert_eq!(opened.may_open(2, |_| true), Ok(()), "another key");
        // One closed: room again.
        assert_eq!(opened.may_open(1, |id| id != "s0"), Ok(()));
        opened.note("t", 2);
        assert_eq!(opened.of(&[2, 3]), ["t"]);
        assert_eq!(opened.of(&[1]).len(), PER_CLIENT - 1, "s0 forgotten");
        let response = Full::Client.response();
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(response.headers()[header::RETRY_AFTER], "60");
    }
}
