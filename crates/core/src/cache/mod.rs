//! The cache: the byte-bounded memory store with single-flight fills, its hot set
//! and the table beside it of 404s asked once, the compressed representations of
//! an answer and when they are made, the read-through decision, the tiers a fill
//! consults before the upstream (the disk tier under memory, the fleet's shared
//! store) and what it keeps of the upstream's answer, the freshness policy
//! (computed from the market clock, [`mdproxy_market`]), and what clients ask for.

pub mod compress;
pub mod demand;
pub mod disk;
mod doorkeeper;
pub mod encoding;
pub mod entry;
pub mod failures;
mod first_asks;
mod flight;
pub mod freshness;
mod hot;
pub mod metrics;
mod origin;
pub mod purge;
pub mod purged;
pub mod readthrough;
pub mod shared;
pub mod store;
pub mod tier;
