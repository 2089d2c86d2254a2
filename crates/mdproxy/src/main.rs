//! The `mdproxy` binary: picks the global allocator and runs the library's command
//! line ([`mdproxy::cli`]). Nothing else lives here.

use std::process::ExitCode;

#[cfg(all(feature = "jemalloc", feature = "mimalloc"))]
compile_error!("choose one allocator feature: jemalloc or mimalloc");

#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    // A background thread returns freed pages to the system (after jemalloc's decay
    // time), so RSS follows the cache and the streams down after a flood; without
    // it pages are purged only while the process keeps allocating.
    #[cfg(feature = "jemalloc")]
    if let Err(e) = tikv_jemalloc_ctl::background_thread::write(true) {
        eprintln!("jemalloc background thread not started: {e}");
    }
    mdproxy::cli::main()
}
