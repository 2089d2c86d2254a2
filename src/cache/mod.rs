//! The cache: the byte-bounded store with single-flight fills, the read-through
//! decision, the cluster's share of a fill, the freshness policy and the market
//! clock it is computed from.

pub mod freshness;
pub mod market;
pub mod readthrough;
pub mod shared;
pub mod store;
