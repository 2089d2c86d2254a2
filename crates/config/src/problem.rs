//! What is wrong with a configuration: each [`Problem`] names its key and where the
//! value was written (a line of the file, or a variable); [`Problems`] is the report
//! of them all, one a line (`FILE:LINE: key: what`), then their number.

use std::fmt;

/// One thing wrong with a configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// The key it is about, as the operator writes it (`server.listen`,
    /// `auth.clients[0].rps`, `freshness.endpoints."/market/indices"`); `None` for
    /// what concerns no key (a syntax error, an unknown variable, an empty file).
    pub key: Option<String>,
    /// Where the value was written; [`At::File`] until the loader places it.
    pub at: At,
    /// What is wrong, without the key: `must be at least 1`.
    pub message: String,
}

impl Problem {
    /// A problem with the value of `key`, placed later by the loader.
    pub fn new(key: impl Into<String>, message: impl Into<String>) -> Problem {
        Problem {
            key: Some(key.into()),
            at: At::File,
            message: message.into(),
        }
    }

    /// A problem that concerns no one key.
    pub fn general(at: At, message: impl Into<String>) -> Problem {
        Problem {
            key: None,
            at,
            message: message.into(),
        }
    }

    /// The top-level table its key is in (`server` for `server.listen`).
    pub fn section(&self) -> Option<&str> {
        self.key
            .as_deref()
            .map(|key| prefixes(key).last().unwrap_or(key))
    }
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

/// Everything wrong with one configuration, in the order of the file, then the
/// variables.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problems {
    /// The file, as named in each line (`configuration` for one built in code).
    pub origin: String,
    /// The problems, in the order of the report.
    pub list: Vec<Problem>,
}

impl Problems {
    /// `list` about `origin`, sorted by where each problem is (problems of one line
    /// keep the order they were found in).
    pub fn new(origin: impl Into<String>, mut list: Vec<Problem>) -> Problems {
        list.sort_by(|a, b| a.at.cmp(&b.at));
        Problems {
            origin: origin.into(),
            list,
        }
    }
}

impl fmt::Display for Problems {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for problem in &self.list {
            match &problem.at {
                At::Line(line) => write!(f, "{}:{line}: ", self.origin)?,
                At::File => write!(f, "{}: ", self.origin)?,
                At::Var(var) => write!(f, "{var}: ")?,
            }
            if let Some(key) = &problem.key {
                write!(f, "{key}: ")?;
            }
            writeln!(f, "{}", problem.message)?;
        }
        let n = self.list.len();
        write!(f, "{n} problem{}", if n == 1 { "" } else { "s" })
    }
}

impl std::error::Error for Problems {}

/// One step of a key's path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Seg {
    Key(String),
    Index(usize),
}

/// A key path as the operator would write it: `auth.clients[0].rps`,
/// `freshness.endpoints."/market/indices"`.
pub(super) fn dotted(path: &[Seg]) -> String {
    let mut out = String::new();
    for segment in path {
        match segment {
            Seg::Key(key) => {
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
            Seg::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

/// `key` and its parents, longest first: `a.b[0].c`, `a.b[0]`, `a.b`, `a`.
pub(super) fn prefixes(key: &str) -> impl Iterator<Item = &str> {
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

pub(super) use mdproxy_api::suggest::{did_you_mean, suggest};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_reads_one_problem_a_line() {
        let problems = Problems::new(
            "deploy/x.toml",
            vec![
                Problem::general(At::Var("MDPROXY_X".into()), "unknown variable"),
                Problem::new("auth.tokens", "at least one client token is required"),
                Problem {
                    at: At::Line(2),
                    ..Problem::new("server.listn", "unknown key")
                },
            ],
        );
        assert_eq!(
            problems.to_string(),
            "deploy/x.toml:2: server.listn: unknown key\n\
             deploy/x.toml: auth.tokens: at least one client token is required\n\
             MDPROXY_X: unknown variable\n\
             3 problems"
        );
        assert_eq!(problems.list[0].section(), Some("server"));
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
        let path = [
            Seg::Key("freshness".into()),
            Seg::Key("endpoints".into()),
            Seg::Key("/a.b".into()),
        ];
        assert_eq!(dotted(&path), "freshness.endpoints.\"/a.b\"");
    }
}
