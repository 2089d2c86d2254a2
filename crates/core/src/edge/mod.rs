//! The HTTP edge toward clients: the accept loop and connection limits, one request's
//! handling (the headers it reads, auth, client limits, CORS, routing), and how
//! answers and errors are written (the encoding chosen by `Accept-Encoding`), and
//! quote streams on the bare socket (`sse`: their heads, HTTP/1.1 chunk framing, the
//! socket as the hub's outlet); an HTTP/2 connection's streams run in its own task
//! (`streams`), and the hub hangs up on one of them alone (`reset`); `/mcp` goes to
//! the MCP endpoint once the key is checked (`mcp`).
//! Below it, the cache and the hub know nothing of HTTP.

pub(crate) mod access_log;
pub(crate) mod admission;
pub(crate) mod auth;
pub(crate) mod bare;
pub mod body;
pub(crate) mod cors;
pub mod handler;
pub(crate) mod head;
pub(crate) mod limit;
pub(crate) mod mcp;
pub(crate) mod memo;
pub(crate) mod negotiate;
pub(crate) mod protocol;
pub(crate) mod reset;
pub(crate) mod response;
pub(crate) mod server;
pub(crate) mod sniff;
pub(crate) mod sse;
pub(crate) mod streams;
pub mod tls;

pub use admission::Closer;
pub use protocol::ConnectionLimits;
pub use server::{Connection, Listening};
