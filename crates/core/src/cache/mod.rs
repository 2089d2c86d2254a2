//! The cache: the byte-bounded store with single-flight fills and its hot set, the
//! compressed representations of an answer and when they are made, the read-through decision, the
//! cluster's share of a fill, the freshness policy (computed from the market
//! clock, [`mdproxy_market`]); the disk tier under the memory and which of its reads
//! memory keeps.

pub mod compress;
pub mod disk;
mod doorkeeper;
pub mod encoding;
pub mod entry;
pub mod failures;
mod flight;
pub mod freshness;
mod hot;
pub mod purge;
pub mod purged;
pub mod readthrough;
pub mod shared;
pub mod store;
