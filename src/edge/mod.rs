//! The HTTP edge toward clients: the accept loop and connection limits, one request's
//! handling (auth, client limits, CORS, routing), and how answers and errors are
//! written. Below it, the cache and the hub know nothing of HTTP.

pub mod auth;
pub mod body;
pub mod cors;
pub mod handler;
pub mod limit;
pub mod response;
pub mod server;
