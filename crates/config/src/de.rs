//! Deserialising the merged TOML table into [`Config`] with every fault found. The
//! walk is serde's own (the derived code of the structs); this deserialiser gives
//! each error a type (unknown key, missing key, wrong type, bad value) and the path
//! it was met at, each table and list adding its key or index as the error passes
//! back through it. The faulty value is then set back to its default (or its list
//! entry left out) and the table deserialised again, until it goes through.
//!
//! The path is recorded here rather than by `serde_path_to_error`, which cannot
//! name a table key that deserialises as an enum (`[freshness.classes.live]`).

use std::collections::HashMap;
use std::fmt;

use serde::Deserialize;
use serde::de::{
    self, DeserializeSeed, Deserializer, IntoDeserializer, MapAccess, SeqAccess, Unexpected,
    Visitor,
};

use super::Config;
use super::problem::{At, Problem, Seg, did_you_mean, dotted, suggest};
use super::secret::is_secret;

/// Most faults reported from one table: every round removes one value, so this only
/// bounds a pathological file.
const MAX_FAULTS: usize = 200;

/// Why a value did not deserialise, and where.
#[derive(Debug)]
pub(super) struct Fault {
    kind: Kind,
    /// The path from the root, built backwards as the error passes each level.
    path: Vec<Seg>,
}

impl From<Kind> for Fault {
    fn from(kind: Kind) -> Fault {
        Fault {
            kind,
            path: Vec::new(),
        }
    }
}

impl Fault {
    /// The fault as seen one level up, from a table's `key` or a list's index.
    fn within(mut self, segment: Seg) -> Fault {
        self.path.push(segment);
        self
    }

    /// The path, root first.
    fn path(&self) -> Vec<Seg> {
        self.path.iter().rev().cloned().collect()
    }
}

/// What serde's derived code reported.
#[derive(Debug)]
enum Kind {
    UnknownKey {
        name: String,
        expected: &'static [&'static str],
    },
    /// An enum's unknown name: a misspelt value (`format = "jsn"`), or a misspelt
    /// key of a table keyed by an enum (`[freshness.classes.lvie]`).
    UnknownName {
        name: String,
        expected: &'static [&'static str],
    },
    MissingKey(&'static str),
    /// Wrong type: what the value is, and what was expected.
    Type {
        found: Found,
        expected: String,
    },
    /// The right type, but not an acceptable value (out of range, an unknown name).
    Value {
        found: Found,
        expected: String,
    },
    Other(String),
}

/// A value as a problem shows it: its kind, and its text unless it is a secret.
#[derive(Debug)]
struct Found {
    kind: &'static str,
    text: Option<String>,
    /// serde's own wording (`integer \`5\``), for "invalid value" messages.
    serde: String,
}

impl Found {
    fn of(unexpected: Unexpected<'_>) -> Found {
        let (kind, text) = match unexpected {
            Unexpected::Str(s) => {
                let mut shown: String = s.chars().take(60).collect();
                if shown.len() < s.len() {
                    shown.push('…');
                }
                ("a string", Some(format!("{shown:?}")))
            }
            Unexpected::Signed(i) => ("an integer", Some(i.to_string())),
            Unexpected::Unsigned(u) => ("an integer", Some(u.to_string())),
            Unexpected::Float(f) => ("a float", Some(f.to_string())),
            Unexpected::Bool(b) => ("a boolean", Some(b.to_string())),
            Unexpected::Seq => ("an array", None),
            Unexpected::Map => ("a table", None),
            _ => ("a value", None),
        };
        Found {
            kind,
            text,
            serde: unexpected.to_string(),
        }
    }

    fn show(&self, secret: bool) -> String {
        match (&self.text, secret) {
            (Some(text), false) => format!("{} {text}", self.kind),
            _ => self.kind.to_owned(),
        }
    }
}

/// serde's name of an expected type, as an operator reads it.
fn describe(expected: &str) -> String {
    match expected {
        "u8" | "u16" | "u32" | "u64" | "usize" | "i8" | "i16" | "i32" | "i64" | "isize" => {
            "an integer".into()
        }
        "f32" | "f64" => "a number".into(),
        "a boolean" => "a boolean (true or false)".into(),
        "a sequence" => "an array".into(),
        "a map" => "a table".into(),
        s if s.starts_with("struct ") => "a table".into(),
        s if s.starts_with("enum ") || s.contains("string") => "a string".into(),
        s => s.to_owned(),
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", dotted(&self.path()))?;
        match &self.kind {
            Kind::UnknownKey { name, .. } => write!(f, "unknown key {name}"),
            Kind::UnknownName { name, .. } => write!(f, "unknown name {name}"),
            Kind::MissingKey(name) => write!(f, "missing key {name}"),
            Kind::Type { found, expected } => {
                write!(f, "expected {expected}, found {}", found.kind)
            }
            Kind::Value { expected, .. } => write!(f, "invalid value, expected {expected}"),
            Kind::Other(message) => f.write_str(message),
        }
    }
}

impl std::error::Error for Fault {}

impl de::Error for Fault {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        Kind::Other(msg.to_string()).into()
    }

    fn invalid_type(unexp: Unexpected<'_>, exp: &dyn de::Expected) -> Self {
        Kind::Type {
            found: Found::of(unexp),
            expected: exp.to_string(),
        }
        .into()
    }

    fn invalid_value(unexp: Unexpected<'_>, exp: &dyn de::Expected) -> Self {
        Kind::Value {
            found: Found::of(unexp),
            expected: exp.to_string(),
        }
        .into()
    }

    fn unknown_variant(variant: &str, expected: &'static [&'static str]) -> Self {
        Kind::UnknownName {
            name: variant.to_owned(),
            expected,
        }
        .into()
    }

    fn unknown_field(field: &str, expected: &'static [&'static str]) -> Self {
        Kind::UnknownKey {
            name: field.to_owned(),
            expected,
        }
        .into()
    }

    fn missing_field(field: &'static str) -> Self {
        Kind::MissingKey(field).into()
    }
}

/// A TOML value deserialised with [`Fault`] as its error.
struct ValueDe(toml::Value);

impl<'de> IntoDeserializer<'de, Fault> for ValueDe {
    type Deserializer = ValueDe;

    fn into_deserializer(self) -> ValueDe {
        self
    }
}

impl<'de> Deserializer<'de> for ValueDe {
    type Error = Fault;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Fault> {
        match self.0 {
            toml::Value::String(s) => visitor.visit_string(s),
            toml::Value::Integer(i) => visitor.visit_i64(i),
            toml::Value::Float(f) => visitor.visit_f64(f),
            toml::Value::Boolean(b) => visitor.visit_bool(b),
            // A bare TOML date (`2026-10-01`) reads as the string it was written as.
            toml::Value::Datetime(d) => visitor.visit_string(d.to_string()),
            toml::Value::Array(items) => visitor.visit_seq(Items {
                items: items.into_iter().enumerate(),
            }),
            toml::Value::Table(table) => visitor.visit_map(Entries {
                entries: table.into_iter(),
                value: None,
            }),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Fault> {
        visitor.visit_some(self)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Fault> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Fault> {
        match self.0 {
            toml::Value::String(s) => visitor.visit_enum(s.into_deserializer()),
            other => ValueDe(other).deserialize_any(visitor),
        }
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf unit unit_struct seq tuple tuple_struct map struct
        identifier ignored_any
    }
}

/// A list's items, each error marked with its index.
struct Items {
    items: std::iter::Enumerate<std::vec::IntoIter<toml::Value>>,
}

impl<'de> SeqAccess<'de> for Items {
    type Error = Fault;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, Fault> {
        match self.items.next() {
            Some((i, item)) => seed
                .deserialize(ValueDe(item))
                .map(Some)
                .map_err(|e| e.within(Seg::Index(i))),
            None => Ok(None),
        }
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.items.len())
    }
}

/// A table's entries, each value's error marked with its key (a key's own error,
/// unknown or misspelt, names the key itself).
struct Entries {
    entries: toml::map::IntoIter<String, toml::Value>,
    value: Option<(String, toml::Value)>,
}

impl<'de> MapAccess<'de> for Entries {
    type Error = Fault;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Fault> {
        let Some((key, value)) = self.entries.next() else {
            return Ok(None);
        };
        let name = seed.deserialize(ValueDe(toml::Value::String(key.clone())))?;
        self.value = Some((key, value));
        Ok(Some(name))
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Fault> {
        let (key, value) = self.value.take().expect("serde asks for a key first");
        seed.deserialize(ValueDe(value))
            .map_err(|e| e.within(Seg::Key(key)))
    }
}

/// `table` as a [`Config`], and a problem for every value that would not
/// deserialise, each with its key (in the file's own numbering of list entries).
/// No config when some fault cannot be stepped past.
pub(super) fn every_fault(table: toml::Table) -> (Option<Config>, Vec<Problem>) {
    let defaults = toml::Value::Table(super::Config::defaults_table());
    let mut root = toml::Value::Table(table);
    let mut problems: Vec<Problem> = Vec::new();
    // Entries left out of each list (by the list's key, in the file's numbering),
    // so later paths are told in the file's numbering too.
    let mut removed: HashMap<String, Vec<usize>> = HashMap::new();
    for _ in 0..MAX_FAULTS {
        let fault = match Config::deserialize(ValueDe(root.clone())) {
            Ok(config) => return (Some(config), problems),
            Err(fault) => fault,
        };
        let current = fault.path();
        let mut fault = fault.kind;
        // An unknown name where a table has that key is a misspelt key.
        if let Kind::UnknownName { name, expected } = &fault
            && lookup(&root, &current).is_some_and(|v| v.get(name).is_some())
        {
            fault = Kind::UnknownKey {
                name: name.clone(),
                expected,
            };
        }
        // The key the fault is about, and the value to take away to step past it.
        let (mut about, mut remove) = (current.clone(), current);
        match &fault {
            // A key's own error is met in its table: the path stops before it.
            Kind::UnknownKey { name, .. } => {
                about.push(Seg::Key(name.clone()));
                remove.push(Seg::Key(name.clone()));
            }
            Kind::MissingKey(name) => {
                about.push(Seg::Key((*name).to_owned()));
                // A list entry without a required key is left out whole.
                while !matches!(remove.last(), Some(Seg::Index(_)) | None) {
                    remove.pop();
                }
            }
            _ => {}
        }
        let original = renumber(&about, &removed);
        let Ok(gone) = take_away(&mut root, Some(&defaults), &remove) else {
            problems.push(Problem::new(dotted(&original), message(&fault, &original)));
            return (None, problems);
        };
        if let Some(index) = gone {
            let list = dotted(&renumber(&remove[..remove.len() - 1], &removed));
            let left_out = removed.entry(list).or_default();
            let index = original_index(index, left_out);
            left_out.push(index);
            left_out.sort_unstable();
        }
        // A value already found wrong is then missing: one problem is enough.
        let key = dotted(&original);
        if !problems.iter().any(|p| p.key.as_deref() == Some(&key)) {
            problems.push(Problem::new(key, message(&fault, &original)));
        }
    }
    problems.push(Problem::general(
        At::File,
        format!("more than {MAX_FAULTS} problems; fix these first"),
    ));
    (None, problems)
}

/// What a problem says about `fault` at `path`.
fn message(fault: &Kind, path: &[Seg]) -> String {
    let secret = is_secret(path);
    match fault {
        Kind::UnknownKey { name, expected } => {
            let parent = &path[..path.len().saturating_sub(1)];
            let mut near: Vec<String> = suggest(name, expected.iter().copied())
                .into_iter()
                .map(|near| {
                    let mut p = parent.to_vec();
                    p.push(Seg::Key(near.to_owned()));
                    dotted(&p)
                })
                .collect();
            if near.is_empty() {
                near = elsewhere(name);
            }
            format!("unknown key{}", did_you_mean(&near))
        }
        Kind::UnknownName { name, expected } => {
            let near: Vec<String> = suggest(name, expected.iter().copied())
                .into_iter()
                .map(str::to_owned)
                .collect();
            format!(
                "{name:?} is not one of {}{}",
                expected.join(", "),
                did_you_mean(&near)
            )
        }
        Kind::MissingKey(_) => "required key missing".into(),
        Kind::Type { found, expected } => {
            format!(
                "expected {}, found {}",
                describe(expected),
                found.show(secret)
            )
        }
        _ if secret => "not a valid value".into(),
        Kind::Value { found, expected } => {
            format!("invalid value: {}, expected {expected}", found.serde)
        }
        Kind::Other(message) => message.clone(),
    }
}

/// The value at `path`, if there is one.
fn lookup<'a>(root: &'a toml::Value, path: &[Seg]) -> Option<&'a toml::Value> {
    path.iter().try_fold(root, |value, segment| match segment {
        Seg::Key(key) => value.get(key),
        Seg::Index(i) => value.get(*i),
    })
}

/// Known keys named `name` in the fixed tables, for a key put in the wrong one.
fn elsewhere(name: &str) -> Vec<String> {
    fn walk(table: &toml::Table, path: &mut Vec<Seg>, name: &str, out: &mut Vec<String>) {
        for (key, value) in table {
            path.push(Seg::Key(key.clone()));
            if key == name {
                out.push(dotted(path));
            }
            if let toml::Value::Table(inner) = value {
                walk(inner, path, name, out);
            }
            path.pop();
        }
    }
    let mut out = Vec::new();
    walk(
        &super::Config::defaults_table(),
        &mut Vec::new(),
        name,
        &mut out,
    );
    out.truncate(3);
    out
}

/// `path` with each list index told in the file's numbering.
fn renumber(path: &[Seg], removed: &HashMap<String, Vec<usize>>) -> Vec<Seg> {
    let mut out: Vec<Seg> = Vec::with_capacity(path.len());
    for segment in path {
        let segment = match segment {
            Seg::Index(i) => match removed.get(&dotted(&out)) {
                Some(left_out) => Seg::Index(original_index(*i, left_out)),
                None => Seg::Index(*i),
            },
            key => key.clone(),
        };
        out.push(segment);
    }
    out
}

/// The file's number of what is now entry `index`, with `left_out` (sorted, in the
/// file's numbering) gone.
fn original_index(index: usize, left_out: &[usize]) -> usize {
    let mut original = index;
    for &gone in left_out {
        if gone <= original {
            original += 1;
        }
    }
    original
}

/// Sets the value at `path` back to its default, or takes it out when it has none.
/// `Err` when there is nothing to take (the root, a path that is not there); the
/// index when an entry of a list went.
fn take_away(
    value: &mut toml::Value,
    default: Option<&toml::Value>,
    path: &[Seg],
) -> Result<Option<usize>, ()> {
    match (path, value) {
        ([Seg::Key(key)], toml::Value::Table(table)) => {
            match default.and_then(|d| d.get(key)) {
                Some(default) => {
                    table.insert(key.clone(), default.clone());
                }
                None => {
                    table.remove(key).ok_or(())?;
                }
            }
            Ok(None)
        }
        ([Seg::Index(i)], toml::Value::Array(items)) if *i < items.len() => {
            items.remove(*i);
            Ok(Some(*i))
        }
        ([Seg::Key(key), rest @ ..], toml::Value::Table(table)) => {
            let inner = table.get_mut(key).ok_or(())?;
            take_away(inner, default.and_then(|d| d.get(key)), rest)
        }
        ([Seg::Index(i), rest @ ..], toml::Value::Array(items)) => {
            take_away(items.get_mut(*i).ok_or(())?, None, rest)
        }
        _ => Err(()),
    }
}
