//! Records the git commit the binary was built from (`mdproxy_build_info`,
//! `/status`), or `unknown` outside a git checkout (a container build context).

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let text = text.trim();
    (out.status.success() && !text.is_empty()).then(|| text.to_owned())
}

fn main() {
    let commit = git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=BUILD_GIT_COMMIT={commit}");
    println!("cargo:rerun-if-changed=build.rs");
    // Built again when HEAD moves; `--git-path` also finds them in a worktree,
    // where `.git` is a file. Only paths that exist: a missing one would make
    // cargo run this script (and rebuild the crate) every time.
    for name in ["HEAD", "refs/heads", "packed-refs"] {
        if let Some(path) = git(&["rev-parse", "--git-path", name])
            && std::path::Path::new(&path).exists()
        {
            println!("cargo:rerun-if-changed={path}");
        }
    }
}
