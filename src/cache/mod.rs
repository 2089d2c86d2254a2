//! The cache: the byte-bounded store with single-flight fills, the read-through
//! decision, the freshness policy and the market clock it is computed from.

pub mod freshness;
pub mod market;
pub mod readthrough;
pub mod store;
