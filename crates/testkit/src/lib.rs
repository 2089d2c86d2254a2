//! Test helpers that belong to neither side of the wire: a loopback HTTP client and
//! raw exchanges, a server-sent event reader, bounded waits, clocks, a scripted
//! upstream for faults, child processes, and programs from outside the toolchain.
//! The simulator's tests and the product's end-to-end tests both use it; it depends
//! on no proxy crate (only on the market's clocks).

pub mod clock;
pub mod http;
pub mod outside;
pub mod process;
pub mod scripted;
pub mod sse;
pub mod wait;
