//! The code keeps its rooms: no function over [`MAX_FN_LINES`] lines, no file over
//! [`MAX_FILE_LINES`] lines of code before its tests (the catalogue's tables
//! excepted), and no circle between the files of a crate when every `crate::` and
//! `super::` path counts, not only `use` lines. A change that brings one back fails
//! here, naming it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The longest a function may be, in lines from its `fn` to its closing brace.
const MAX_FN_LINES: usize = 120;

/// The most lines of code a file may hold before its `#[cfg(test)] mod tests`.
const MAX_FILE_LINES: usize = 700;

/// Every `.rs` file under each crate's `src/`, by crate: its path relative to that
/// `src/` and its text. `tests.rs` files (unit tests kept apart) are left out.
fn sources() -> BTreeMap<PathBuf, BTreeMap<PathBuf, String>> {
    let crates = Path::new(crate::support::ROOT).join("crates");
    let mut all = BTreeMap::new();
    for entry in std::fs::read_dir(&crates).unwrap() {
        let src = entry.unwrap().path().join("src");
        if !src.is_dir() {
            continue;
        }
        let mut files = BTreeMap::new();
        let mut dirs = vec![src.clone()];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    dirs.push(path);
                } else if path.extension().is_some_and(|e| e == "rs")
                    && path.file_name().is_some_and(|n| n != "tests.rs")
                {
                    let text = std::fs::read_to_string(&path).unwrap();
                    files.insert(path.strip_prefix(&src).unwrap().to_owned(), text);
                }
            }
        }
        all.insert(src, files);
    }
    all
}

/// `src` with comments, strings and character literals blanked (newlines kept), so
/// braces and `fn` inside them do not count.
fn blank(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    let blank_to = |out: &mut Vec<u8>, from: usize, to: usize| {
        out.extend(
            b[from..to]
                .iter()
                .map(|&c| if c == b'\n' { b'\n' } else { b' ' }),
        );
    };
    while i < b.len() {
        let rest = &b[i..];
        let word_before = i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_');
        let end = if rest.starts_with(b"//") {
            i + rest.iter().position(|&c| c == b'\n').unwrap_or(rest.len())
        } else if rest.starts_with(b"/*") {
            let (mut depth, mut j) = (1, i + 2);
            while j < b.len() && depth > 0 {
                if b[j..].starts_with(b"/*") {
                    (depth, j) = (depth + 1, j + 2);
                } else if b[j..].starts_with(b"*/") {
                    (depth, j) = (depth - 1, j + 2);
                } else {
                    j += 1;
                }
            }
            j
        } else if !word_before && let Some(end) = raw_string_end(b, i) {
            end
        } else if rest[0] == b'"' {
            let mut j = i + 1;
            while j < b.len() && b[j] != b'"' {
                j += if b[j] == b'\\' { 2 } else { 1 };
            }
            j + 1
        } else if rest[0] == b'\''
            && let Some(len) = char_literal(rest)
        {
            i + len
        } else {
            out.push(rest[0]);
            i += 1;
            continue;
        };
        let end = end.min(b.len());
        blank_to(&mut out, i, end);
        i = end;
    }
    String::from_utf8(out).expect("blanking keeps ASCII structure")
}

/// Where the raw string (`r"…"`, `r#"…"#`, `br"…"`) starting at `i` ends, if one does.
fn raw_string_end(b: &[u8], i: usize) -> Option<usize> {
    let mut j = i;
    if b.get(j) == Some(&b'b') {
        j += 1;
    }
    if b.get(j) != Some(&b'r') {
        return None;
    }
    j += 1;
    let hashes = b[j..].iter().take_while(|&&c| c == b'#').count();
    j += hashes;
    if b.get(j) != Some(&b'"') {
        return None;
    }
    let close: Vec<u8> = std::iter::once(b'"')
        .chain(std::iter::repeat_n(b'#', hashes))
        .collect();
    let found = b[j + 1..].windows(close.len()).position(|w| w == close)?;
    Some(j + 1 + found + close.len())
}

/// The length of the character literal at the start of `rest` (`'a'`, `'\n'`,
/// `'\u{1F600}'`), or `None` for a lifetime.
fn char_literal(rest: &[u8]) -> Option<usize> {
    if rest.get(1) == Some(&b'\\') {
        let close = rest[2..].iter().take(10).position(|&c| c == b'\'')?;
        return Some(close + 3);
    }
    let text = std::str::from_utf8(&rest[1..rest.len().min(6)]).unwrap_or_default();
    let c = text.chars().next()?;
    (text[c.len_utf8()..].starts_with('\'')).then(|| 2 + c.len_utf8())
}

/// Every function of `src` (already blanked): its name, first line and length in lines.
fn functions(blanked: &str) -> Vec<(String, usize, usize)> {
    let signature = regex::Regex::new(
        r#"^\s*(?:pub(?:\([^)]*\))?\s+)?(?:const\s+)?(?:async\s+)?(?:unsafe\s+)?fn\s+(\w+)"#,
    )
    .unwrap();
    let line_starts: Vec<usize> = std::iter::once(0)
        .chain(blanked.match_indices('\n').map(|(i, _)| i + 1))
        .collect();
    let b = blanked.as_bytes();
    let mut found = Vec::new();
    for (line, &start) in line_starts.iter().enumerate() {
        let text = &blanked[start..];
        let Some(m) = signature.captures(text.lines().next().unwrap_or_default()) else {
            continue;
        };
        // The body's opening brace: the first `{` outside parentheses, unless a `;`
        // ends a declaration without a body first.
        let (mut depth, mut k) = (0i32, start);
        let open = loop {
            match b.get(k) {
                None | Some(b';') if depth == 0 => break None,
                None => break None,
                Some(b'(' | b'[') => depth += 1,
                Some(b')' | b']') => depth -= 1,
                Some(b'{') if depth == 0 => break Some(k),
                _ => {}
            }
            k += 1;
        };
        let Some(open) = open else { continue };
        let (mut braces, mut j) = (0, open);
        while j < b.len() {
            match b[j] {
                b'{' => braces += 1,
                b'}' => {
                    braces -= 1;
                    if braces == 0 {
                        break;
                    }
                }
                _ => {}
            }
            j += 1;
        }
        let last = blanked[..j].matches('\n').count();
        found.push((m[1].to_owned(), line + 1, last - line + 1));
    }
    found
}

/// The code of a file before its unit tests.
fn before_tests(text: &str) -> &str {
    let tests = regex::Regex::new(r"#\[cfg\(test\)\]\s*mod tests\s*\{").unwrap();
    tests.find(text).map_or(text, |m| &text[..m.start()])
}

/// The module path of a file relative to its crate's `src/`.
fn module_of(file: &Path) -> Vec<String> {
    let mut parts: Vec<String> = file
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// The files of one crate that reach each other through `crate::`/`super::` paths
/// in a circle, each circle sorted.
fn circles(files: &BTreeMap<PathBuf, String>) -> Vec<Vec<PathBuf>> {
    let by_module: BTreeMap<Vec<String>, &PathBuf> =
        files.keys().map(|f| (module_of(f), f)).collect();
    let path = regex::Regex::new(r"\b(crate|super)((?:::\w+)+)").unwrap();
    let mut edges: BTreeMap<&PathBuf, BTreeSet<&PathBuf>> = BTreeMap::new();
    for (file, text) in files {
        let here = module_of(file);
        let targets = edges.entry(file).or_default();
        for m in path.captures_iter(before_tests(text)) {
            let mut parts: Vec<String> = if &m[1] == "crate" {
                Vec::new()
            } else {
                here[..here.len().saturating_sub(1)].to_vec()
            };
            parts.extend(m[2].trim_start_matches(':').split("::").map(str::to_owned));
            // The longest prefix that is a file's module.
            let target = (1..=parts.len())
                .rev()
                .find_map(|n| by_module.get(&parts[..n]).copied());
            if let Some(target) = target
                && target != file
            {
                targets.insert(target);
            }
        }
    }
    strongly_connected(&edges)
        .into_iter()
        .filter(|c| c.len() > 1)
        .map(|c| c.into_iter().cloned().collect())
        .collect()
}

/// Tarjan's strongly connected components of `edges`.
fn strongly_connected<'a>(
    edges: &BTreeMap<&'a PathBuf, BTreeSet<&'a PathBuf>>,
) -> Vec<BTreeSet<&'a PathBuf>> {
    struct Walk<'a, 'e> {
        edges: &'e BTreeMap<&'a PathBuf, BTreeSet<&'a PathBuf>>,
        index: BTreeMap<&'a PathBuf, usize>,
        low: BTreeMap<&'a PathBuf, usize>,
        stack: Vec<&'a PathBuf>,
        on: BTreeSet<&'a PathBuf>,
        out: Vec<BTreeSet<&'a PathBuf>>,
    }
    impl<'a> Walk<'a, '_> {
        fn visit(&mut self, v: &'a PathBuf) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            self.on.insert(v);
            for &w in self.edges.get(v).into_iter().flatten() {
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let low = self.low[v].min(self.low[w]);
                    self.low.insert(v, low);
                } else if self.on.contains(w) {
                    let low = self.low[v].min(self.index[w]);
                    self.low.insert(v, low);
                }
            }
            if self.low[v] == self.index[v] {
                let mut component = BTreeSet::new();
                while let Some(w) = self.stack.pop() {
                    self.on.remove(w);
                    component.insert(w);
                    if w == v {
                        break;
                    }
                }
                self.out.push(component);
            }
        }
    }
    let mut walk = Walk {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for &v in edges.keys() {
        if !walk.index.contains_key(v) {
            walk.visit(v);
        }
    }
    walk.out
}

/// No function of any crate's `src/` is longer than [`MAX_FN_LINES`] lines.
#[test]
fn no_function_is_over_its_limit() {
    let mut long = Vec::new();
    for (src, files) in sources() {
        for (file, text) in files {
            for (name, line, lines) in functions(&blank(&text)) {
                if lines > MAX_FN_LINES {
                    long.push(format!(
                        "{}:{line} {name} ({lines} lines)",
                        src.join(&file).display()
                    ));
                }
            }
        }
    }
    assert!(
        long.is_empty(),
        "functions over {MAX_FN_LINES} lines:\n{}",
        long.join("\n")
    );
}

/// No file holds more than [`MAX_FILE_LINES`] lines of code before its tests; the
/// catalogue's endpoint tables are data and excepted.
#[test]
fn no_file_is_over_its_limit() {
    let mut big = Vec::new();
    for (src, files) in sources() {
        for (file, text) in files {
            let name = file.to_string_lossy();
            let lines = before_tests(&text).lines().count();
            if lines > MAX_FILE_LINES && !name.contains("catalog") && !name.contains("endpoints") {
                big.push(format!("{} ({lines} lines)", src.join(&file).display()));
            }
        }
    }
    assert!(
        big.is_empty(),
        "files over {MAX_FILE_LINES} lines of code:\n{}",
        big.join("\n")
    );
}

/// No two files of a crate reach each other, directly or around a circle, through
/// `crate::` or `super::` paths.
#[test]
fn no_circle_between_files() {
    let mut found = Vec::new();
    for (src, files) in sources() {
        for circle in circles(&files) {
            let names: Vec<String> = circle
                .iter()
                .map(|f| src.join(f).display().to_string())
                .collect();
            found.push(names.join(" <-> "));
        }
    }
    assert!(
        found.is_empty(),
        "circles between files:\n{}",
        found.join("\n")
    );
}

/// The checks see what they look for: a long function, a file's tests left out,
/// a circle through `super::`, and strings and comments that hold braces.
#[test]
fn the_checks_find_what_they_look_for() {
    let long = format!("fn long() {{\n{}}}\n", "    let _ = 1;\n".repeat(130));
    assert_eq!(functions(&blank(&long)), [("long".to_owned(), 1, 132)]);
    let tricky = "fn a() {\n    let s = \"}\"; // }\n    let c = '}';\n    let r = r#\"}\"#;\n}\nfn b<'x>(v: &'x str) {}\n";
    let found = functions(&blank(tricky));
    assert_eq!(found, [("a".to_owned(), 1, 5), ("b".to_owned(), 6, 1)]);
    assert_eq!(before_tests("a\n#[cfg(test)]\nmod tests {\n}\n"), "a\n");
    let files: BTreeMap<PathBuf, String> = [
        ("lib.rs", "mod a; mod b;"),
        ("a.rs", "use super::b::B;"),
        ("b.rs", "fn f() { crate::a::g() }"),
        ("c.rs", "use crate::a::A;"),
    ]
    .into_iter()
    .map(|(f, t)| (PathBuf::from(f), t.to_owned()))
    .collect();
    assert_eq!(
        circles(&files),
        [vec![PathBuf::from("a.rs"), PathBuf::from("b.rs")]]
    );
}

/// The top-level modules of `src` that `lib.rs`'s `# Layout` lists as bullets
/// (`//! - [`name`]: ...`), in its order.
fn layers(lib: &str) -> Vec<String> {
    let bullet = regex::Regex::new(r"^//! - \[`(\w+)`\]").unwrap();
    lib.lines()
        .skip_while(|l| !l.starts_with("//! # Layout"))
        .take_while(|l| l.starts_with("//!"))
        .filter_map(|l| bullet.captures(l).map(|c| c[1].to_owned()))
        .collect()
}

/// The core's modules use only modules below them in the order its `lib.rs` gives
/// (the prose is held by this test), and that order names every module.
#[test]
fn the_core_layers_point_down() {
    let src = Path::new(crate::support::ROOT).join("crates/core/src");
    let files = &sources()[&src];
    let order = layers(&files[Path::new("lib.rs")]);
    let declared: BTreeSet<String> = regex::Regex::new(r"(?m)^pub mod (\w+);")
        .unwrap()
        .captures_iter(&files[Path::new("lib.rs")])
        .map(|c| c[1].to_owned())
        .collect();
    assert_eq!(
        order.iter().cloned().collect::<BTreeSet<_>>(),
        declared,
        "lib.rs's layout lists every module once"
    );
    let rank = |m: &str| order.iter().position(|o| o == m);
    let path = regex::Regex::new(r"\bcrate::(\w+)").unwrap();
    let mut upward = Vec::new();
    for (file, text) in files {
        let Some(top) = module_of(file).first().cloned() else {
            continue;
        };
        let Some(here) = rank(&top) else { continue };
        for m in path.captures_iter(before_tests(text)) {
            if let Some(there) = rank(&m[1])
                && there < here
            {
                upward.push(format!(
                    "{} uses crate::{} (above it)",
                    file.display(),
                    &m[1]
                ));
            }
        }
    }
    assert!(upward.is_empty(), "{}", upward.join("\n"));
}
