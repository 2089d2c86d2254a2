//! Programs from outside the Rust toolchain (redis-server, Chromium, the Python
//! tools, npm, systemd-analyze, hadolint). The tests that need one are `#[ignore]`d
//! with the reason, so `cargo test` on a machine with only a Rust toolchain runs
//! without them and installs nothing; `scripts/test` installs them and runs the
//! ignored tests too (`-- --include-ignored`). There a missing program fails the
//! test loudly: it never skips.

use std::path::{Path, PathBuf};

/// The path of `program` on `PATH`; fails the test when it is not there.
pub fn program(program: &str) -> PathBuf {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(program))
            .find(|path| is_executable(path))
    });
    found.unwrap_or_else(|| {
        panic!("{program} is not on PATH: run the suite with scripts/test, which installs it")
    })
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The `bin/` of the Python tools' virtual environment (schemathesis, the OpenAPI
/// validator, the OpenMetrics parser, kubernetes-validate, hadolint), which
/// `scripts/python-tools` made under `target_dir`; fails the test when it is not
/// there. Nothing is installed here.
pub fn python_tools(target_dir: &Path) -> PathBuf {
    let bin = target_dir.join("pyenv").join("bin");
    assert!(
        bin.join("python").exists(),
        "the Python tools are not installed at {}: run the suite with scripts/test, which installs them",
        bin.display()
    );
    bin
}
