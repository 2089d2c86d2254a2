//! Several nodes as one cache toward the upstream, on Redis (`[cluster]`). Every
//! operation is bounded by a short timeout; when Redis is away the node works alone
//! (its own cache, single flight and budget), says so once, and rejoins when Redis
//! answers again. The rest of mdproxy sees only narrow traits, held by [`Fleet`],
//! whose single-node versions are the defaults.
//!
//! The files, from the leaves up (none imports a file above it):
//! - `conn`: the one place that makes (and remakes) the connections.
//! - `link`: the link every part runs its commands on (up and away, the
//!   heartbeat, the key prefix and the events channel).
//! - `purges`: the purge log in Redis, for the nodes that miss a publication, and
//!   this node's purges kept while Redis is away.
//! - [`store`]: the shared store of answers and cluster-wide purges.
//! - [`lock`]: the fill lock (one node per key asks the upstream) and its publication.
//! - [`permits`]: the fleet's upstream budget (GCRA on Redis's clock).
//! - [`limits`]: the upstream's pushback shared by the fleet: `Retry-After` pauses,
//!   the adaptive rate, the vendor quotas.
//! - [`jobs`]: one run of each scheduled job for the fleet.
//! - [`leader`]: the hub's leader lease and the board it relays.
//! - [`agents`]: AI agents' MCP sessions, so that any node answers any of them.
//!
//!   Each of these seven holds its trait, the words of that trait, and its version
//!   on Redis.
//! - `member`: [`Cluster`], this node's membership: the link, one of each part, and
//!   the watcher that keeps the link up and hands each publication to its part.
//! - [`fleet`]: [`Fleet`], one of each face, and [`Alone`], the single node's.

pub mod agents;
mod conn;
pub mod fleet;
pub mod jobs;
pub mod leader;
pub mod limits;
mod link;
pub mod lock;
mod member;
pub mod metrics;
pub mod permits;
mod purges;
pub mod store;

pub use conn::ClusterError;
pub use fleet::{Alone, Fleet};
pub use jobs::JobClaims;
pub use leader::Leadership;
pub use limits::FleetLimits;
pub use link::Unavailable;
pub use lock::{FillLock, Lease, Waiter};
pub use member::Cluster;
pub use permits::Permits;
pub use store::SharedStore;
