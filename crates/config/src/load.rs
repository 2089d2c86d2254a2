//! Loading: the file's text is parsed (keeping each key's line), laid over the
//! defaults, the `MDPROXY_*` overrides laid over that in one pass, the whole
//! deserialised once, then judged by the value checks of [`Config::problems`] and
//! the checks other modules own; every problem is reported at once, each placed at
//! its line or variable.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;

use toml::de::{DeTable, DeValue};

use super::Config;
use super::env::{Env, overlay, unknown_vars};
use super::problem::{At, Problem, Problems, Seg, dotted, prefixes};

/// A check another module owns (the scheduler's cron expressions, the probe's
/// target, the TLS files), run by [`load`] after the configuration's own; its
/// problems are placed like theirs. Passed in, so that the configuration imports
/// none of its readers.
pub type Check = fn(&Config, &dyn Env) -> Vec<Problem>;

/// Reads `path` and loads it with overrides from `env` (see [`from_text`]).
///
/// # Errors
/// Every problem of the file, the environment and `checks`, or why the file could
/// not be read.
pub fn load(path: &Path, env: &dyn Env, checks: &[Check]) -> Result<Config, Problems> {
    let origin = path.display().to_string();
    match std::fs::read_to_string(path) {
        Ok(text) => from_text(&text, &origin, env, checks),
        Err(e) => Err(Problems::new(
            origin,
            vec![Problem::general(
                At::File,
                format!("cannot read the file: {e}"),
            )],
        )),
    }
}

/// Loads TOML `text` (named `origin` in problems) with overrides from `env`, and
/// judges it all, reporting every problem at once: syntax errors; else unknown keys,
/// values of the wrong type or out of range and misspelt `MDPROXY_*` variables; then
/// the value checks, those a served file must pass ([`Config::deployable`]) and
/// `checks`, for the sections without a mistake of the first kind (with that key
/// left out they would judge defaults the operator did not mean).
///
/// A file that sets no key is refused whatever the environment holds: an empty or
/// cut-short file is never what an operator meant to run.
///
/// # Errors
/// [`Problems`], each with its key and its line or variable.
pub fn from_text(
    text: &str,
    origin: &str,
    env: &dyn Env,
    checks: &[Check],
) -> Result<Config, Problems> {
    let lines = Lines::new(text);
    let mut problems = unknown_vars(&env.names());
    let (document, syntax) = DeTable::parse_recoverable(text);
    if !syntax.is_empty() {
        // Past a syntax error the parser's recovery may misread what follows, so the
        // keys are judged only once the file parses.
        let mut seen = BTreeSet::new();
        for error in syntax {
            let at = error
                .span()
                .map_or(At::File, |s| At::Line(lines.at(s.start)));
            let message = format!("invalid TOML: {}", error.message().trim());
            if seen.insert((at.clone(), message.clone())) {
                problems.push(Problem::general(at, message));
            }
        }
        return Err(Problems::new(origin, problems));
    }
    let mut keys = Keys::default();
    keys.table(document.get_ref(), &lines, &mut Vec::new());
    if keys.values == 0 {
        problems.push(Problem::general(
            At::File,
            "the file sets no key; an empty or cut-short file is never applied, whatever the environment holds",
        ));
    }
    let file: toml::Table = match text.parse() {
        Ok(file) => file,
        Err(e) => {
            problems.push(Problem::general(At::File, format!("invalid TOML: {e}")));
            return Err(Problems::new(origin, problems));
        }
    };

    let mut table = Config::defaults_table();
    merge(&mut table, file);
    let overlay = overlay(&mut table, env);
    let from_env = &overlay.from_env;
    let place = |mut problem: Problem| {
        if let Some(key) = &problem.key
            && problem.at == At::File
        {
            // The variable that set it (or the list it is in), else its line or
            // its table's.
            problem.at = match prefixes(key).find_map(|k| from_env.get(k)) {
                Some(var) => At::Var(var.clone()),
                None => prefixes(key)
                    .find_map(|k| keys.lines.get(k))
                    .map_or(At::File, |&line| At::Line(line)),
            };
        }
        problem
    };
    let (config, faults) = super::de::every_fault(table);
    let structural: Vec<Problem> = overlay
        .problems
        .clone()
        .into_iter()
        .chain(faults)
        .map(place)
        .collect();
    let tainted: BTreeSet<&str> = structural.iter().filter_map(Problem::section).collect();
    let mut judged = Vec::new();
    if let Some(config) = &config {
        let found = config
            .problems()
            .into_iter()
            .chain(config.deployable())
            .chain(checks.iter().flat_map(|check| check(config, env)));
        for problem in found {
            if problem.section().is_none_or(|s| !tainted.contains(s)) {
                judged.push(place(problem));
            }
        }
    }
    problems.extend(structural);
    problems.extend(judged);
    match config {
        Some(config) if problems.is_empty() => Ok(config),
        _ => Err(Problems::new(origin, problems)),
    }
}

/// Lays `over` onto `base`: tables merge key by key, anything else replaces.
fn merge(base: &mut toml::Table, over: toml::Table) {
    for (key, value) in over {
        match (base.get_mut(&key), value) {
            (Some(toml::Value::Table(b)), toml::Value::Table(o)) => merge(b, o),
            (_, value) => {
                base.insert(key, value);
            }
        }
    }
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

/// Where the file writes each key (and each entry of a list), and how many values
/// it sets.
#[derive(Default)]
struct Keys {
    lines: HashMap<String, usize>,
    values: usize,
}

impl Keys {
    fn table(&mut self, table: &DeTable<'_>, lines: &Lines, path: &mut Vec<Seg>) {
        for (key, value) in table.iter() {
            path.push(Seg::Key(key.get_ref().to_string()));
            self.lines.insert(dotted(path), lines.at(key.span().start));
            self.value(value.get_ref(), lines, path);
            path.pop();
        }
    }

    fn value(&mut self, value: &DeValue<'_>, lines: &Lines, path: &mut Vec<Seg>) {
        match value {
            DeValue::Table(inner) => self.table(inner, lines, path),
            DeValue::Array(items) => {
                self.values += 1;
                for (i, item) in items.iter().enumerate() {
                    path.push(Seg::Index(i));
                    self.lines.insert(dotted(path), lines.at(item.span().start));
                    self.value(item.get_ref(), lines, path);
                    path.pop();
                }
            }
            _ => self.values += 1,
        }
    }
}
