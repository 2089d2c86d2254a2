//! The example configurations under `deploy/` name in their comments only keys and
//! variables that exist.

use std::collections::BTreeSet;

use super::*;

/// Every key a configuration can have, dotted, and each leaf name alone.
fn known_keys() -> BTreeSet<String> {
    fn walk(value: &toml::Value, path: &mut Vec<String>, out: &mut BTreeSet<String>) {
        let table = match value {
            toml::Value::Table(table) => table,
            toml::Value::Array(items) => return items.iter().for_each(|i| walk(i, path, out)),
            _ => return,
        };
        for (key, value) in table {
            path.push(key.clone());
            out.insert(path.join("."));
            out.insert(key.clone());
            walk(value, path, out);
            path.pop();
        }
    }
    let mut example = Config::defaults_table();
    let entry = |value: toml::Table| toml::Value::Array(vec![toml::Value::Table(value)]);
    let fallback = FallbackConfig {
        base_url: "https://x/api/v1".into(),
        token: Secret::new("k"),
        upstream_rps: Some(1),
        upstream_burst: Some(1),
        upstream_per_minute: Some(1),
        upstream_per_day: Some(1),
    };
    let client = ClientConfig {
        name: "c".into(),
        token: Secret::new("k"),
        rps: Some(1),
        burst: Some(1),
    };
    let job = JobConfig {
        name: "j".into(),
        cron: "x".into(),
        targets: Vec::new(),
        session_only: true,
    };
    example["upstream"]["fallback"] = entry(toml::Table::try_from(fallback).unwrap());
    example["auth"]["clients"] = entry(toml::Table::try_from(client).unwrap());
    example["scheduler"]["jobs"] = entry(toml::Table::try_from(job).unwrap());
    let mut out = BTreeSet::new();
    walk(&toml::Value::Table(example), &mut Vec::new(), &mut out);
    out
}

/// Every key and variable a comment of a shipped config names exists: the
/// comments are what operators copy from.
#[test]
fn deploy_comments_name_only_real_keys() {
    let known = known_keys();
    let vars: Vec<String> = env_keys().into_iter().map(|k| k.var).collect();
    let sections: Vec<String> = Config::defaults_table().keys().cloned().collect();

    let mut files = Vec::new();
    let mut dirs = vec![std::path::PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy"
    ))];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "toml") {
                files.push(path);
            }
        }
    }
    assert!(!files.is_empty());
    let mut wrong = Vec::new();
    let mut checked = 0;
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for (n, line) in text.lines().enumerate() {
            let Some(comment) = comment(line) else {
                continue;
            };
            let mut rest = comment;
            while let Some(start) = rest.find(|c: char| c.is_ascii_alphanumeric() || c == '_') {
                let before = rest[..start].chars().last();
                let len = rest[start..]
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.'))
                    .unwrap_or(rest.len() - start);
                let token = rest[start..start + len].trim_end_matches('.');
                let after = rest[start + len..].chars().next();
                rest = &rest[start + len..];
                // A page of the manual (`docs/cluster.md`) is no key.
                if !token.chars().any(|c| c.is_ascii_alphabetic()) || token.ends_with(".md") {
                    continue;
                }
                let ok = if let Some(var) = token.strip_prefix("MDPROXY_") {
                    // `MDPROXY_<SECTION>_<KEY>` is a pattern, not a name.
                    var.is_empty() || token.ends_with('_') || vars.iter().any(|v| v == token)
                } else if token.contains('.') {
                    let first = token.split('.').next().unwrap_or_default();
                    !sections.iter().any(|s| s == first) || known.contains(token)
                } else if before == Some('[') && after == Some(']') {
                    known.contains(token)
                        || token.chars().any(|c| !c.is_ascii_lowercase() && c != '_')
                } else if token.contains('_')
                    && token
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
                {
                    known.contains(token)
                } else {
                    continue;
                };
                checked += 1;
                if !ok {
                    wrong.push(format!("{}:{}: {token}", file.display(), n + 1));
                }
            }
        }
    }
    assert!(checked > 5, "the scan found the keys the comments name");
    assert!(
        wrong.is_empty(),
        "comments name keys that do not exist:\n{}",
        wrong.join("\n")
    );
}

/// The comment of a TOML line: from the first `#` outside a string.
fn comment(line: &str) -> Option<&str> {
    let mut quote = None;
    for (i, c) in line.char_indices() {
        match (quote, c) {
            (None, '#') => return Some(&line[i + 1..]),
            (None, '"' | '\'') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            _ => {}
        }
    }
    None
}
