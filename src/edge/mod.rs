//! The HTTP edge toward clients: the accept loop and connection limits, one request's
//! handling (the headers it reads, auth, client limits, CORS, routing), and how
//! answers and errors are written (the encoding chosen by `Accept-Encoding`). Below it, the cache knows nothing of HTTP, and the hub only how an
//! HTTP/1.1 chunk is framed (it writes stream events to bare sockets itself).

pub(crate) mod admission;
pub(crate) mod auth;
pub mod body;
pub(crate) mod cors;
pub mod handler;
pub(crate) mod head;
pub(crate) mod limit;
pub(crate) mod negotiate;
pub(crate) mod protocol;
pub(crate) mod response;
pub(crate) mod server;
pub(crate) mod sniff;
pub(crate) mod sse;
pub mod tls;

pub use protocol::ConnectionLimits;
pub use server::{Connection, Listening};
