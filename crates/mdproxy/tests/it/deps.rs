//! Every dependency a crate declares is one it uses, and every one the workspace
//! declares is one a crate takes: an unused one costs build time and a place in
//! Cargo.lock. A crate's `[dependencies]` must be named in its `src/`; its
//! `[dev-dependencies]` in its tests, benches, examples or unit tests.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The text of every `.rs` file under `dirs`.
fn text_under(dirs: &[PathBuf]) -> String {
    let mut text = String::new();
    let mut stack: Vec<PathBuf> = dirs.iter().filter(|d| d.is_dir()).cloned().collect();
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                text.push_str(&std::fs::read_to_string(&path).unwrap());
            }
        }
    }
    text
}

/// The names of a dependency table (`[dependencies]` and the target-specific ones).
fn names(manifest: &toml::Table, table: &str) -> BTreeSet<String> {
    let mut found: BTreeSet<String> = manifest
        .get(table)
        .and_then(toml::Value::as_table)
        .map(|t| t.keys().cloned().collect())
        .unwrap_or_default();
    if let Some(targets) = manifest.get("target").and_then(toml::Value::as_table) {
        for target in targets.values() {
            if let Some(t) = target.get(table).and_then(toml::Value::as_table) {
                found.extend(t.keys().cloned());
            }
        }
    }
    found
}

/// Whether `text` names the crate `dependency` (a path through it, a `use`, an
/// `extern crate`).
fn is_named(text: &str, dependency: &str) -> bool {
    let name = regex::escape(&dependency.replace('-', "_"));
    regex::Regex::new(&format!(
        r"\b{name}::|\buse\s+{name}\b|extern\s+crate\s+{name}\b"
    ))
    .unwrap()
    .is_match(text)
}

fn manifest(path: &Path) -> toml::Table {
    toml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Each crate uses what it declares.
#[test]
fn every_declared_dependency_is_used() {
    let crates = Path::new(crate::support::ROOT).join("crates");
    let mut unused = Vec::new();
    for entry in std::fs::read_dir(&crates).unwrap() {
        let dir = entry.unwrap().path();
        let m = manifest(&dir.join("Cargo.toml"));
        let src = text_under(&[dir.join("src")]);
        for name in names(&m, "dependencies") {
            if !is_named(&src, &name) {
                unused.push(format!("{}: {name}", dir.display()));
            }
        }
        let dev = text_under(&[
            dir.join("src"),
            dir.join("tests"),
            dir.join("benches"),
            dir.join("examples"),
        ]);
        for name in names(&m, "dev-dependencies") {
            if !is_named(&dev, &name) {
                unused.push(format!("{} (dev): {name}", dir.display()));
            }
        }
    }
    assert!(
        unused.is_empty(),
        "declared but never named:\n{}",
        unused.join("\n")
    );
}

/// Every `[workspace.dependencies]` entry is taken by some crate.
#[test]
fn every_workspace_dependency_is_taken() {
    let root = Path::new(crate::support::ROOT);
    let workspace = manifest(&root.join("Cargo.toml"));
    let declared = workspace["workspace"]["dependencies"]
        .as_table()
        .expect("[workspace.dependencies]");
    let mut taken = BTreeSet::new();
    for entry in std::fs::read_dir(root.join("crates")).unwrap() {
        let m = manifest(&entry.unwrap().path().join("Cargo.toml"));
        taken.extend(names(&m, "dependencies"));
        taken.extend(names(&m, "dev-dependencies"));
    }
    let untaken: Vec<&String> = declared.keys().filter(|k| !taken.contains(*k)).collect();
    assert!(
        untaken.is_empty(),
        "declared for the workspace, taken by no crate: {untaken:?}"
    );
}

/// The check finds what it looks for.
#[test]
fn a_name_counts_only_as_a_path_a_use_or_an_extern_crate() {
    assert!(is_named("use serde::Deserialize;", "serde"));
    assert!(is_named("let x = foyer_storage::IoB;", "foyer-storage"));
    assert!(is_named("use bytes;", "bytes"));
    assert!(!is_named("// bytes of the body", "bytes"));
    assert!(!is_named("let h2 = 1;", "h2"));
    assert!(!is_named("my_serde::x", "serde"));
}
