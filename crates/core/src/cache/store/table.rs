//! How many entries moka's table is made for when the store is made.
//!
//! moka's concurrent table clears the tombstones its removals leave by rehashing a
//! segment whenever they reach a tenth of its buckets. Grown only as far as its live
//! entries need (it doubles past 70 % full), a full cache, where every insert
//! evicts, rehashes by those thresholds three to seven live keys, cold in memory,
//! per eviction. Made for entries of [`ENTRY_BYTES`] (only the smallest quotes and
//! lists are smaller), a cache of 10 KB answers rehashes about one key in two
//! evictions. Measured in a full 64 MiB cache: a news search's miss took 2.6 %
//! fewer instructions, and the table and the hashing of its keys went from 8.7 %
//! to 7.5 % of a news search flood's CPU (docs/BENCHMARKS.md, "Instructions per
//! miss").

/// The entry size the table is made for.
const ENTRY_BYTES: u64 = 2048;

/// The most entries the table is made for: 2^19, which moka lays out as 64 segments
/// of 2^15 buckets (16 MiB of pointers, zeroed when the cache is made), reached at
/// 1 GiB of `max_bytes`. The default 256 MiB takes 4 MiB.
const MAX_ENTRIES: u64 = 1 << 19;

/// The entries moka's table is made for in a cache of `max_bytes`.
pub(super) fn entries(max_bytes: u64) -> usize {
    usize::try_from((max_bytes / ENTRY_BYTES).min(MAX_ENTRIES)).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_made_for_small_entries_up_to_a_bound() {
        assert_eq!(entries(0), 0);
        assert_eq!(entries(64 << 20), 32_768);
        assert_eq!(entries(256 << 20), 131_072);
        assert_eq!(entries(1 << 30), 1 << 19);
        assert_eq!(entries(1 << 40), 1 << 19, "a bound, whatever the cache");
    }
}
