//! Futures made in the box that holds them. `Box::pin(future)` makes the future
//! on the stack and copies it whole into the box; a miss's futures are kilobytes
//! (a fill's is about 3 KB), and such copies were a third of the 24 KB a relayed
//! 404 copied (docs/BENCHMARKS.md, "Instructions per miss"). Allocated first, the
//! box can be the constructor's return slot, and the future is written there once.

use std::pin::Pin;

/// `make()`'s value, pinned in a box allocated before `make` runs. For the copy
/// to be left out, `make` should call a function that is not inlined (an `async
/// fn` marked `#[inline(never)]`, a closure taken as a parameter): its return slot
/// is then the box. Otherwise this is `Box::pin(make())`.
#[inline(always)]
pub fn boxed<F>(make: impl FnOnce() -> F) -> Pin<Box<F>> {
    Box::into_pin(Box::write(Box::new_uninit(), make()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[inline(never)]
    async fn big(n: u64) -> u64 {
        let table = [n; 512];
        tokio::task::yield_now().await;
        table.iter().sum()
    }

    #[tokio::test]
    async fn the_boxed_future_runs_as_it_was_made() {
        // A state of 4 KB, suspended once: the value it gives is the one it was made with.
        assert_eq!(boxed(|| big(3)).await, 3 * 512);
    }
}
