//! Checking a configuration file whole: every syntax error, unknown key, value of the
//! wrong type and misspelt `MDPROXY_*` variable is found in one pass, each with its
//! key and line, before the value checks of [`Config::problems`] run.
//!
//! The file is walked against the configuration's own shape, derived from
//! `Config::default()` (so it cannot drift from the structs), plus the few parts the
//! defaults cannot show: lists of tables (`[[auth.clients]]`, `[[scheduler.jobs]]`)
//! and tables of the operator's own naming (`[freshness.endpoints."/path"]`). Each
//! value of the right type is then deserialised on its own (laid over the defaults or
//! over an example entry), which finds what types cannot say: a number out of range,
//! an unknown freshness class, a malformed date.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;

use serde::de::{DeserializeOwned, IntoDeserializer};
use serde::{Deserialize, Serialize};
use toml::Spanned;
use toml::de::{DeTable, DeValue};

use super::{
    ClientConfig, Config, ConfigError, ENV_PREFIX, Env, FILE_ONLY, FallbackConfig, JobConfig,
    Secret, TtlOverride, env_keys, env_var, parse_like,
};

/// One thing wrong with a configuration: where, and what (starting with the key).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    pub at: At,
    pub message: String,
}

/// Where a [`Problem`] is.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum At {
    /// A line of the file, from 1.
    Line(usize),
    /// The file as a whole (a key it lacks, a rule between keys it does not set).
    File,
    /// An environment variable.
    Var(String),
}

/// Everything wrong with one configuration, one problem a line, then their number.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problems {
    /// The file, as named in each line.
    pub origin: String,
    pub list: Vec<Problem>,
}

impl fmt::Display for Problems {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for problem in &self.list {
            match &problem.at {
                At::Line(line) => writeln!(f, "{}:{line}: {}", self.origin, problem.message)?,
                At::File => writeln!(f, "{}: {}", self.origin, problem.message)?,
                At::Var(var) => writeln!(f, "{var}: {}", problem.message)?,
            }
        }
        let n = self.list.len();
        write!(f, "{n} problem{}", if n == 1 { "" } else { "s" })
    }
}

/// Parses `text`, lays it and the environment over the defaults, and checks it all;
/// `more` adds the checks of other modules (the scheduler's cron expressions).
pub(super) fn load(
    text: &str,
    origin: &str,
    env: &dyn Env,
    more: &dyn Fn(&Config) -> Vec<String>,
) -> Result<Config, ConfigError> {
    let lines = Lines::new(text);
    let mut problems = unknown_vars(&env.names());
    let (document, syntax) = DeTable::parse_recoverable(text);
    if !syntax.is_empty() {
        // Past a syntax error the parser's recovery may misread what follows, so the
        // keys are checked only once the file parses.
        let mut seen = BTreeSet::new();
        for error in syntax {
            let at = error
                .span()
                .map_or(At::File, |s| At::Line(lines.at(s.start)));
            let message = format!("invalid TOML: {}", error.message().trim());
            if seen.insert((at.clone(), message.clone())) {
                problems.push(Problem { at, message });
            }
        }
        return Err(finish(origin, problems));
    }

    let schema = schema();
    let mut walk = Walk {
        lines: &lines,
        schema: &schema,
        problems: Vec::new(),
        keys: HashMap::new(),
    };
    let mut path = Vec::new();
    let file = walk.table(document.get_ref(), schema.table(), &mut path, None, 1);
    // A section with a bad key or variable gets no value checks: with that key left
    // out they would judge defaults the operator did not mean.
    let mut tainted: BTreeSet<String> = walk
        .problems
        .iter()
        .map(|(key, _)| section(key).to_owned())
        .collect();
    let keys = walk.keys;
    problems.extend(walk.problems.into_iter().map(|(_, p)| p));

    let mut value = defaults();
    super::merge(&mut value, file);
    let from_env = apply_env(&mut value, env, &mut problems, &mut tainted);
    let config = match Config::deserialize(toml::Value::Table(value)) {
        Ok(config) => config,
        Err(e) => {
            // Every value was deserialised alone above; this is a safety net.
            problems.push(Problem {
                at: At::File,
                message: e.message().to_owned(),
            });
            return Err(finish(origin, problems));
        }
    };
    let structural = !problems.is_empty();
    for message in config.problems().into_iter().chain(more(&config)) {
        let key = leading_key(&message);
        if structural && tainted.contains(section(key)) {
            continue;
        }
        let at = match from_env.get(key) {
            Some(var) => At::Var(var.clone()),
            None => prefixes(key)
                .find_map(|k| keys.get(k))
                .map_or(At::File, |&line| At::Line(line)),
        };
        problems.push(Problem { at, message });
    }
    if problems.is_empty() {
        Ok(config)
    } else {
        Err(finish(origin, problems))
    }
}

fn finish(origin: &str, mut list: Vec<Problem>) -> ConfigError {
    // Stable: problems of one line keep the order they were found in.
    list.sort_by(|a, b| a.at.cmp(&b.at));
    ConfigError::Problems(Problems {
        origin: origin.to_owned(),
        list,
    })
}

/// The defaults as a TOML table, the base every file is laid over.
pub(super) fn defaults() -> toml::Table {
    toml::Table::try_from(Config::default()).expect("defaults serialise")
}

/// Byte offsets to line numbers.
struct Lines(Vec<usize>);

impl Lines {
    fn new(text: &str) -> Lines {
        Lines(
            std::iter::once(0)
                .chain(text.match_indices('\n').map(|(i, _)| i + 1))
                .collect(),
        )
    }

    fn at(&self, offset: usize) -> usize {
        self.0.partition_point(|&start| start <= offset)
    }
}

/// What a value must look like.
enum Shape {
    Bool,
    Integer,
    Float,
    String,
    Datetime,
    Array(Box<Shape>),
    Table(Table),
    /// A table of the operator's own keys, every value of one shape.
    Map(Box<Shape>),
    /// Not described (an empty list in the defaults); a test keeps this out.
    Any,
}

/// A table of known keys.
struct Table {
    fields: BTreeMap<String, Field>,
    /// Set where a deserialisable type starts (the whole config, one list entry): each
    /// value is tried alone on it.
    probe: Option<Probe>,
}

struct Field {
    shape: Shape,
    required: bool,
}

/// A complete example of a type and its deserialiser, to try one value in.
struct Probe {
    base: toml::Table,
    check: fn(toml::Value) -> Result<(), String>,
}

fn check_as<T: DeserializeOwned>(value: toml::Value) -> Result<(), String> {
    T::deserialize(value)
        .map(drop)
        .map_err(|e| e.message().to_owned())
}

impl Shape {
    fn of(value: &toml::Value) -> Shape {
        match value {
            toml::Value::String(_) => Shape::String,
            toml::Value::Integer(_) => Shape::Integer,
            toml::Value::Float(_) => Shape::Float,
            toml::Value::Boolean(_) => Shape::Bool,
            toml::Value::Datetime(_) => Shape::Datetime,
            toml::Value::Array(items) => {
                Shape::Array(Box::new(items.first().map_or(Shape::Any, Shape::of)))
            }
            toml::Value::Table(table) => Shape::Table(Table {
                fields: table
                    .iter()
                    .map(|(key, value)| {
                        let shape = Shape::of(value);
                        (
                            key.clone(),
                            Field {
                                shape,
                                required: false,
                            },
                        )
                    })
                    .collect(),
                probe: None,
            }),
        }
    }

    /// The shape of one entry of type `T`, from a complete example: a key is required
    /// when `T` does not deserialise without it.
    fn entry<T: Serialize + DeserializeOwned>(example: &T) -> Shape {
        let base = toml::Table::try_from(example).expect("examples serialise");
        let check = check_as::<T>;
        let Shape::Table(mut table) = Shape::of(&toml::Value::Table(base.clone())) else {
            unreachable!("a table's shape is a table")
        };
        for (key, field) in &mut table.fields {
            let mut without = base.clone();
            without.remove(key);
            field.required = check(toml::Value::Table(without)).is_err();
        }
        table.probe = Some(Probe { base, check });
        Shape::Table(table)
    }

    fn table(&self) -> &Table {
        match self {
            Shape::Table(table) => table,
            _ => unreachable!("the root is a table"),
        }
    }

    /// The field at `path` (of known tables).
    fn at(&mut self, path: &[&str]) -> &mut Shape {
        let mut shape = self;
        for key in path {
            let Shape::Table(table) = shape else {
                unreachable!("{key}: not a table in the defaults")
            };
            shape = &mut table
                .fields
                .get_mut(*key)
                .unwrap_or_else(|| unreachable!("{key}: not in the defaults"))
                .shape;
        }
        shape
    }

    fn describe(&self) -> String {
        match self {
            Shape::Bool => "a boolean (true or false)".into(),
            Shape::Integer => "an integer".into(),
            Shape::Float => "a number".into(),
            Shape::String => "a string".into(),
            Shape::Datetime => "a date-time".into(),
            Shape::Array(item) => format!("an array of {}", item.plural()),
            Shape::Table(_) | Shape::Map(_) => "a table".into(),
            Shape::Any => "any value".into(),
        }
    }

    fn plural(&self) -> &'static str {
        match self {
            Shape::Bool => "booleans",
            Shape::Integer => "integers",
            Shape::Float => "numbers",
            Shape::String => "strings",
            Shape::Datetime => "date-times",
            Shape::Array(_) => "arrays",
            Shape::Table(_) | Shape::Map(_) => "tables",
            Shape::Any => "values",
        }
    }

    fn accepts(&self, value: &DeValue<'_>) -> bool {
        matches!(
            (self, value),
            (Shape::Any, _)
                | (Shape::Bool, DeValue::Boolean(_))
                | (Shape::Integer, DeValue::Integer(_))
                | (Shape::Float, DeValue::Float(_) | DeValue::Integer(_))
                | (Shape::String, DeValue::String(_))
                | (Shape::Datetime, DeValue::Datetime(_))
                | (Shape::Array(_), DeValue::Array(_))
                | (Shape::Table(_) | Shape::Map(_), DeValue::Table(_))
        )
    }
}

/// The configuration's shape: the defaults', plus what they cannot show.
fn schema() -> Shape {
    let defaults = defaults();
    let mut root = Shape::of(&toml::Value::Table(defaults.clone()));
    let Shape::Table(table) = &mut root else {
        unreachable!("the defaults are a table")
    };
    table.probe = Some(Probe {
        base: defaults,
        check: check_as::<Config>,
    });
    let strings = || Shape::Array(Box::new(Shape::String));
    *root.at(&["auth", "tokens"]) = strings();
    *root.at(&["server", "cors_origins"]) = strings();
    // Dates are written as strings, "2026-10-01".
    *root.at(&["calendar", "holidays"]) = strings();
    *root.at(&["auth", "clients"]) = Shape::Array(Box::new(Shape::entry(&ClientConfig {
        name: "example".into(),
        token: Secret::new("example"),
        rps: Some(1),
        burst: Some(1),
    })));
    *root.at(&["scheduler", "jobs"]) = Shape::Array(Box::new(Shape::entry(&JobConfig {
        name: "example".into(),
        cron: "0 0 9 * * Mon-Fri".into(),
        targets: vec!["/market/indices".into()],
        session_only: true,
    })));
    *root.at(&["upstream", "endpoint_timeouts_ms"]) = Shape::Map(Box::new(Shape::Integer));
    *root.at(&["upstream", "fallback"]) = Shape::Array(Box::new(Shape::entry(&FallbackConfig {
        base_url: "https://example.com/api/v1".into(),
        token: Secret::new("example"),
        upstream_rps: Some(1),
        upstream_burst: Some(1),
        upstream_per_minute: Some(1),
        upstream_per_day: Some(1),
    })));
    *root.at(&["freshness", "endpoints"]) = Shape::Map(Box::new(Shape::entry(&TtlOverride {
        session_fresh_secs: Some(1),
        session_stale_secs: Some(1),
        closed_fresh_secs: Some(1),
        closed_stale_secs: Some(1),
        until_open: Some(true),
        error_secs: Some(1),
    })));
    root
}

/// One step of a key's path.
#[derive(Clone, Debug)]
enum Segment {
    Key(String),
    Index(usize),
}

/// A key path as the operator would write it: `auth.clients[0].rps`,
/// `freshness.endpoints."/market/indices"`.
fn dotted(path: &[Segment]) -> String {
    let mut out = String::new();
    for segment in path {
        match segment {
            Segment::Key(key) => {
                if !out.is_empty() {
                    out.push('.');
                }
                let bare = !key.is_empty()
                    && key
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
                if bare {
                    out.push_str(key);
                } else {
                    out.push_str(&format!("{key:?}"));
                }
            }
            Segment::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

/// The key a problem message starts with: `server.listen: ...` or
/// `hub.batch_size must be ...`.
fn leading_key(message: &str) -> &str {
    let mut quoted = false;
    for (i, c) in message.char_indices() {
        match c {
            '"' => quoted = !quoted,
            ':' | ' ' if !quoted => return &message[..i],
            _ => {}
        }
    }
    message
}

/// `key` and its parents, longest first: `a.b[0].c`, `a.b[0]`, `a.b`, `a`.
fn prefixes(key: &str) -> impl Iterator<Item = &str> {
    let mut quoted = false;
    let mut cuts: Vec<usize> = key
        .char_indices()
        .filter_map(|(i, c)| {
            if c == '"' {
                quoted = !quoted;
            }
            (!quoted && (c == '.' || c == '[') && i > 0).then_some(i)
        })
        .collect();
    cuts.push(key.len());
    cuts.into_iter().rev().map(move |i| &key[..i])
}

/// The top-level table a key is in.
fn section(key: &str) -> &str {
    prefixes(key).last().unwrap_or(key)
}

/// Keys whose values are secrets: their values never appear in a problem.
fn secret(path: &[Segment]) -> bool {
    matches!(path.last(), Some(Segment::Key(k)) if matches!(k.as_str(), "token" | "tokens" | "redis_url"))
        || matches!(path, [Segment::Key(a), Segment::Key(b), Segment::Index(_)] if a == "auth" && b == "tokens")
}

/// A found value, for a message: its type, and its text unless it is a secret.
fn found(value: &DeValue<'_>, path: &[Segment]) -> String {
    let text = match value {
        DeValue::String(s) => {
            let mut shown: String = s.chars().take(60).collect();
            if shown.len() < s.len() {
                shown.push('…');
            }
            format!("{shown:?}")
        }
        DeValue::Integer(i) => i.to_string(),
        DeValue::Float(f) => f.to_string(),
        DeValue::Boolean(b) => b.to_string(),
        DeValue::Datetime(d) => d.to_string(),
        DeValue::Array(_) => return "an array".into(),
        DeValue::Table(_) => return "a table".into(),
    };
    let kind = match value {
        DeValue::String(_) => "a string",
        DeValue::Integer(_) => "an integer",
        DeValue::Float(_) => "a float",
        DeValue::Boolean(_) => "a boolean",
        _ => "a date-time",
    };
    if secret(path) {
        kind.into()
    } else {
        format!("{kind} {text}")
    }
}

/// The names in `candidates` closest to `word`, if any is close: first those that
/// hold all of its words in order (a word left out: `live_fresh_secs` for
/// `live_session_fresh_secs`), else those a few typos away.
pub(super) fn suggest<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Vec<&'a str> {
    fn words(name: &str) -> Vec<String> {
        name.to_ascii_lowercase()
            .split(['_', '-', '.', '/'])
            .filter(|w| !w.is_empty())
            .map(str::to_owned)
            .collect()
    }
    let candidates: Vec<&str> = candidates.into_iter().collect();
    let wanted = words(word);
    let mut holding: Vec<&str> = candidates
        .iter()
        .copied()
        .filter(|c| {
            let mut theirs = words(c).into_iter();
            !wanted.is_empty() && wanted.iter().all(|w| theirs.any(|t| t == *w))
        })
        .collect();
    if !holding.is_empty() {
        holding.sort_by_key(|c| (c.len(), *c));
        holding.truncate(3);
        return holding;
    }
    let word = word.to_ascii_lowercase();
    let mut scored: Vec<(usize, &str)> = candidates
        .into_iter()
        .map(|c| {
            (
                strsim::damerau_levenshtein(&word, &c.to_ascii_lowercase()),
                c,
            )
        })
        .filter(|&(d, c)| d <= (c.len() / 3).max(2))
        .collect();
    scored.sort();
    let Some(&(best, _)) = scored.first() else {
        return Vec::new();
    };
    scored
        .into_iter()
        .take_while(|&(d, _)| d <= best + 1)
        .take(3)
        .map(|(_, c)| c)
        .collect()
}

fn did_you_mean(names: &[String]) -> String {
    match names {
        [] => String::new(),
        [one] => format!(" (did you mean {one}?)"),
        [init @ .., last] => format!(" (did you mean {} or {last}?)", init.join(", ")),
    }
}

/// The file walked against the shape.
struct Walk<'a> {
    lines: &'a Lines,
    schema: &'a Shape,
    /// Problems found, with the key each is about.
    problems: Vec<(String, Problem)>,
    /// The line of every key in the file.
    keys: HashMap<String, usize>,
}

impl Walk<'_> {
    fn problem(&mut self, path: &[Segment], line: usize, message: impl fmt::Display) {
        let key = dotted(path);
        self.problems.push((
            key.clone(),
            Problem {
                at: At::Line(line),
                message: format!("{key}: {message}"),
            },
        ));
    }

    /// Checks a table of known keys; returns what of it is good. `probe` is the
    /// nearest deserialisable type above, with the depth of `path` it starts at.
    fn table(
        &mut self,
        table: &DeTable<'_>,
        shape: &Table,
        path: &mut Vec<Segment>,
        probe: Option<(&Probe, usize)>,
        line: usize,
    ) -> toml::Table {
        let probe = match &shape.probe {
            Some(own) => Some((own, path.len())),
            None => probe,
        };
        let mut good = toml::Table::new();
        for (key, value) in table.iter() {
            let name: &str = key.get_ref();
            path.push(Segment::Key(name.to_owned()));
            let at = self.lines.at(key.span().start);
            self.keys.insert(dotted(path), at);
            match shape.fields.get(name) {
                Some(field) => {
                    if let Some(value) = self.value(value, &field.shape, path, probe, at) {
                        good.insert(name.to_owned(), value);
                    }
                }
                None => {
                    let message = self.unknown(name, shape, path);
                    self.problem(path, at, message);
                }
            }
            path.pop();
        }
        for (name, field) in &shape.fields {
            if field.required && !good.contains_key(name) && !table.contains_key(name.as_str()) {
                path.push(Segment::Key(name.clone()));
                self.problem(path, line, "required key missing");
                path.pop();
            }
        }
        good
    }

    /// "unknown key", with the nearest known keys of the same table or, failing
    /// that, keys of the same name elsewhere.
    fn unknown(&self, name: &str, shape: &Table, path: &[Segment]) -> String {
        let parent = &path[..path.len() - 1];
        let mut names: Vec<String> = suggest(name, shape.fields.keys().map(String::as_str))
            .into_iter()
            .map(|near| {
                let mut p = parent.to_vec();
                p.push(Segment::Key(near.to_owned()));
                dotted(&p)
            })
            .collect();
        if names.is_empty() {
            names = elsewhere(self.schema, name);
        }
        format!("unknown key{}", did_you_mean(&names))
    }

    fn value(
        &mut self,
        value: &Spanned<DeValue<'_>>,
        shape: &Shape,
        path: &mut Vec<Segment>,
        probe: Option<(&Probe, usize)>,
        line: usize,
    ) -> Option<toml::Value> {
        if !shape.accepts(value.get_ref()) {
            let message = format!(
                "expected {}, found {}",
                shape.describe(),
                found(value.get_ref(), path)
            );
            self.problem(path, line, message);
            return None;
        }
        match (shape, value.get_ref()) {
            (Shape::Table(table), DeValue::Table(inner)) => Some(toml::Value::Table(
                self.table(inner, table, path, probe, line),
            )),
            (Shape::Map(entry), DeValue::Table(inner)) => {
                let mut good = toml::Table::new();
                for (key, value) in inner.iter() {
                    let name: &str = key.get_ref();
                    path.push(Segment::Key(name.to_owned()));
                    let at = self.lines.at(key.span().start);
                    self.keys.insert(dotted(path), at);
                    let before = self.problems.len();
                    let checked = self.value(value, entry, path, probe, at);
                    if let (Some(checked), true) = (checked, self.problems.len() == before) {
                        good.insert(name.to_owned(), checked);
                    }
                    path.pop();
                }
                Some(toml::Value::Table(good))
            }
            (Shape::Array(item), DeValue::Array(items))
                if matches!(**item, Shape::Table(_) | Shape::Map(_)) =>
            {
                let mut good = Vec::new();
                for (i, value) in items.iter().enumerate() {
                    path.push(Segment::Index(i));
                    let at = self.lines.at(value.span().start);
                    self.keys.insert(dotted(path), at);
                    let before = self.problems.len();
                    let checked = self.value(value, item, path, probe, at);
                    // An entry with a bad key is left out whole: it may lack a
                    // required one.
                    if let (Some(checked), true) = (checked, self.problems.len() == before) {
                        good.push(checked);
                    }
                    path.pop();
                }
                Some(toml::Value::Array(good))
            }
            (Shape::Array(item), DeValue::Array(items)) => {
                let mut ok = true;
                for (i, value) in items.iter().enumerate() {
                    if !item.accepts(value.get_ref()) {
                        path.push(Segment::Index(i));
                        let at = self.lines.at(value.span().start);
                        let message = format!(
                            "expected {}, found {}",
                            item.describe(),
                            found(value.get_ref(), path)
                        );
                        self.problem(path, at, message);
                        path.pop();
                        ok = false;
                    }
                }
                if ok {
                    self.leaf(value, path, probe, line)
                } else {
                    None
                }
            }
            _ => self.leaf(value, path, probe, line),
        }
    }

    /// A value of the right type, tried alone in its type's example.
    fn leaf(
        &mut self,
        value: &Spanned<DeValue<'_>>,
        path: &[Segment],
        probe: Option<(&Probe, usize)>,
        line: usize,
    ) -> Option<toml::Value> {
        let value = match toml::Value::deserialize(value.clone().into_deserializer()) {
            Ok(value) => value,
            Err(e) => {
                self.problem(path, line, e.message());
                return None;
            }
        };
        if let Some((probe, depth)) = probe {
            let mut base = probe.base.clone();
            let rel: Vec<&str> = path[depth..]
                .iter()
                .map(|s| match s {
                    Segment::Key(k) => k.as_str(),
                    Segment::Index(_) => unreachable!("lists of tables start their own probe"),
                })
                .collect();
            set(&mut base, &rel, value.clone());
            if let Err(message) = (probe.check)(toml::Value::Table(base)) {
                let message = if secret(path) {
                    "not a valid value".to_owned()
                } else {
                    message
                };
                self.problem(path, line, message);
                return None;
            }
        }
        Some(value)
    }
}

/// Known keys named `name` anywhere in the fixed tables.
fn elsewhere(schema: &Shape, name: &str) -> Vec<String> {
    fn walk(shape: &Shape, path: &mut Vec<Segment>, name: &str, out: &mut Vec<String>) {
        if let Shape::Table(table) = shape {
            for (key, field) in &table.fields {
                path.push(Segment::Key(key.clone()));
                if key == name {
                    out.push(dotted(path));
                }
                walk(&field.shape, path, name, out);
                path.pop();
            }
        }
    }
    let mut out = Vec::new();
    walk(schema, &mut Vec::new(), name, &mut out);
    out.truncate(3);
    out
}

/// Sets `path` in `table` to `value`, making tables on the way.
fn set(table: &mut toml::Table, path: &[&str], value: toml::Value) {
    let (last, parents) = path.split_last().expect("a leaf has a key");
    let mut node = table;
    for key in parents {
        let entry = node
            .entry((*key).to_owned())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        if !entry.is_table() {
            *entry = toml::Value::Table(toml::Table::new());
        }
        node = entry.as_table_mut().expect("made a table");
    }
    node.insert((*last).to_owned(), value);
}

/// Every `MDPROXY_*` variable in `names` that is not a configuration key.
pub(super) fn unknown_vars(names: &[String]) -> Vec<Problem> {
    let known: Vec<String> = env_keys().into_iter().map(|k| k.var).collect();
    let prefix = format!("{ENV_PREFIX}_");
    let mut problems = Vec::new();
    for name in names {
        if !name.starts_with(&prefix) || known.contains(name) || service_link(name) {
            continue;
        }
        let file_only = FILE_ONLY.iter().find(|key| {
            let path: Vec<String> = key.split('.').map(str::to_owned).collect();
            let var = env_var(&path);
            *name == var || name.starts_with(&format!("{var}_"))
        });
        let message = match file_only {
            Some(key) => format!("not a variable: {key} can be set in the file only"),
            None => {
                let near: Vec<String> = suggest(name, known.iter().map(String::as_str))
                    .into_iter()
                    .map(str::to_owned)
                    .collect();
                if near.is_empty() {
                    "unknown variable: no configuration key has this name (README \"Configuration\" lists them)".to_owned()
                } else {
                    format!("unknown variable{}", did_you_mean(&near))
                }
            }
        };
        problems.push(Problem {
            at: At::Var(name.clone()),
            message,
        });
    }
    problems
}

/// Whether `name` is one of the variables Kubernetes puts into every pod for each
/// Service of the namespace (unless `enableServiceLinks: false`): a Service called
/// `mdproxy` gives `MDPROXY_SERVICE_HOST`, `MDPROXY_PORT_8080_TCP_ADDR` and so on.
/// They are not configuration keys, and a pod must not refuse to start over them.
fn service_link(name: &str) -> bool {
    let rest = |marker: &str| name.find(marker).map(|i| &name[i + marker.len()..]);
    if name.ends_with("_SERVICE_HOST") || name.ends_with("_PORT") {
        return true;
    }
    if let Some(port_name) = rest("_SERVICE_PORT") {
        return port_name.is_empty() || port_name.starts_with('_');
    }
    // `_PORT_<number>_<protocol>`, then nothing or `_PROTO`, `_PORT` or `_ADDR`.
    name.match_indices("_PORT_").any(|(i, marker)| {
        let mut parts = name[i + marker.len()..].split('_');
        let number = parts.next().unwrap_or_default();
        let protocol = parts.next().unwrap_or_default();
        let field: Vec<&str> = parts.collect();
        !number.is_empty()
            && number.bytes().all(|b| b.is_ascii_digit())
            && matches!(protocol, "TCP" | "UDP" | "SCTP")
            && matches!(field.as_slice(), [] | ["PROTO" | "PORT" | "ADDR"])
    })
}

/// Lays the environment's overrides over `table`; a bad value is a problem, and
/// taints its section. Returns which keys came from which variable.
fn apply_env(
    table: &mut toml::Table,
    env: &dyn Env,
    problems: &mut Vec<Problem>,
    tainted: &mut BTreeSet<String>,
) -> HashMap<String, String> {
    let defaults = defaults();
    let mut from_env = HashMap::new();
    for key in env_keys() {
        let Some(raw) = env.var(&key.var) else {
            continue;
        };
        let dotted_key = key.path.join(".");
        let mut like = &defaults;
        for segment in &key.path[..key.path.len() - 1] {
            like = like[segment].as_table().expect("env_keys() walked tables");
        }
        let leaf = &like[key.path.last().expect("keys are non-empty")];
        let problem = match parse_like(leaf, &raw) {
            Ok(value) => {
                let path: Vec<&str> = key.path.iter().map(String::as_str).collect();
                let mut probe = defaults.clone();
                set(&mut probe, &path, value.clone());
                match check_as::<Config>(toml::Value::Table(probe)) {
                    Ok(()) => {
                        set(table, &path, value);
                        None
                    }
                    Err(message) => Some(message),
                }
            }
            Err(message) => Some(message),
        };
        match problem {
            Some(message) => {
                let segments: Vec<Segment> = key.path.iter().cloned().map(Segment::Key).collect();
                let message = if secret(&segments) {
                    "not a valid value".to_owned()
                } else {
                    message
                };
                tainted.insert(key.path[0].clone());
                problems.push(Problem {
                    at: At::Var(key.var.clone()),
                    message: format!("{dotted_key}: {message}"),
                });
            }
            None => {
                from_env.insert(dotted_key, key.var);
            }
        }
    }
    from_env
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every list in the defaults has its entries described: a new list field must
    /// be added to `schema()`, or its entries would go unchecked.
    #[test]
    fn the_schema_describes_every_list() {
        fn walk(shape: &Shape, path: &mut Vec<String>) {
            match shape {
                Shape::Any => panic!("{}: entries not described in schema()", path.join(".")),
                Shape::Array(item) | Shape::Map(item) => walk(item, path),
                Shape::Table(table) => {
                    for (key, field) in &table.fields {
                        path.push(key.clone());
                        walk(&field.shape, path);
                        path.pop();
                    }
                }
                _ => {}
            }
        }
        walk(&schema(), &mut Vec::new());
    }

    #[test]
    fn required_keys_come_from_the_types() {
        let schema = schema();
        let Shape::Table(auth) = &schema.table().fields["auth"].shape else {
            panic!()
        };
        let Shape::Array(client) = &auth.fields["clients"].shape else {
            panic!()
        };
        let required: Vec<&str> = client
            .table()
            .fields
            .iter()
            .filter(|(_, f)| f.required)
            .map(|(k, _)| k.as_str())
            .collect();
        assert_eq!(required, ["name", "token"]);
    }

    #[test]
    fn keys_split_into_parents() {
        assert_eq!(
            prefixes("auth.clients[0].rps").collect::<Vec<_>>(),
            [
                "auth.clients[0].rps",
                "auth.clients[0]",
                "auth.clients",
                "auth"
            ]
        );
        assert_eq!(
            prefixes("freshness.endpoints.\"/a.b\"").collect::<Vec<_>>(),
            [
                "freshness.endpoints.\"/a.b\"",
                "freshness.endpoints",
                "freshness"
            ]
        );
        assert_eq!(
            leading_key("hub.batch_size must be at least 1"),
            "hub.batch_size"
        );
        assert_eq!(
            leading_key("freshness.endpoints.\"/x y\": no such endpoint"),
            "freshness.endpoints.\"/x y\""
        );
        assert_eq!(section("server.listen"), "server");
    }

    #[test]
    fn kubernetes_service_links_are_not_mistakes() {
        for name in [
            "MDPROXY_SERVICE_HOST",
            "MDPROXY_SERVICE_PORT",
            "MDPROXY_SERVICE_PORT_HTTP",
            "MDPROXY_PORT",
            "MDPROXY_PORT_8080_TCP",
            "MDPROXY_PORT_8080_TCP_ADDR",
            "MDPROXY_REDIS_PORT_6379_TCP_PROTO",
        ] {
            assert!(service_link(name), "{name}");
            assert!(unknown_vars(&[name.to_owned()]).is_empty(), "{name}");
        }
        for name in [
            "MDPROXY_SERVER_LISTN",
            "MDPROXY_PORT_X_TCP",
            "MDPROXY_PORTS",
        ] {
            assert!(!service_link(name), "{name}");
        }
    }

    /// Every key and variable a comment of a shipped config names exists: the
    /// comments are what operators copy from.
    #[test]
    fn deploy_comments_name_only_real_keys() {
        fn paths(shape: &Shape, path: &mut Vec<String>, out: &mut BTreeSet<String>) {
            let fields = match shape {
                Shape::Table(table) => &table.fields,
                Shape::Array(item) | Shape::Map(item) => return paths(item, path, out),
                _ => return,
            };
            for (key, field) in fields {
                path.push(key.clone());
                out.insert(path.join("."));
                // Leaf names alone, as prose names them.
                out.insert(key.clone());
                paths(&field.shape, path, out);
                path.pop();
            }
        }
        let schema = schema();
        let mut known = BTreeSet::new();
        paths(&schema, &mut Vec::new(), &mut known);
        let vars: Vec<String> = env_keys().into_iter().map(|k| k.var).collect();
        let sections: Vec<&String> = schema.table().fields.keys().collect();

        let mut files = Vec::new();
        let mut dirs = vec![std::path::PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/deploy"
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
                    if !token.chars().any(|c| c.is_ascii_alphabetic()) {
                        continue;
                    }
                    let ok = if let Some(var) = token.strip_prefix("MDPROXY_") {
                        // `MDPROXY_<SECTION>_<KEY>` is a pattern, not a name.
                        var.is_empty() || token.ends_with('_') || vars.iter().any(|v| v == token)
                    } else if token.contains('.') {
                        let first = token.split('.').next().unwrap_or_default();
                        !sections.iter().any(|s| *s == first) || known.contains(token)
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

    #[test]
    fn suggestions_are_near_names_only() {
        assert_eq!(suggest("listn", ["listen", "keep_alive"]), ["listen"]);
        assert!(suggest("zzz", ["listen", "keep_alive"]).is_empty());
        assert_eq!(
            suggest(
                "MDPROXY_FRESHNESS_CLASSES_LIVE_FRESH_SECS",
                [
                    "MDPROXY_FRESHNESS_CLASSES_LIVE_ERROR_SECS",
                    "MDPROXY_FRESHNESS_CLASSES_LIVE_SESSION_FRESH_SECS",
                    "MDPROXY_FRESHNESS_CLASSES_LIVE_CLOSED_FRESH_SECS",
                    "MDPROXY_FRESHNESS_CLASSES_NEWS_SESSION_FRESH_SECS",
                ]
            ),
            [
                "MDPROXY_FRESHNESS_CLASSES_LIVE_CLOSED_FRESH_SECS",
                "MDPROXY_FRESHNESS_CLASSES_LIVE_SESSION_FRESH_SECS"
            ]
        );
        assert_eq!(
            suggest(
                "timeout",
                ["connect_timeout_ms", "timeout_ms", "keep_alive"]
            ),
            ["timeout_ms", "connect_timeout_ms"]
        );
    }
}
