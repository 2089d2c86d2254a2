//! What the running binary says of itself: its version and the git commit it was
//! built from. The binary crate knows the commit (its build script reads it) and
//! hands it over once at start; a library built without it says `unknown`.

use std::sync::OnceLock;

/// The version of the crates (the workspace shares one).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

static COMMIT: OnceLock<&'static str> = OnceLock::new();

/// Records the commit the binary was built from; the first call wins.
pub fn set_commit(commit: &'static str) {
    let _ = COMMIT.set(commit);
}

/// The commit the binary was built from, or `unknown` (tests, benches, a build
/// outside a git checkout).
pub fn commit() -> &'static str {
    COMMIT.get().copied().unwrap_or("unknown")
}
