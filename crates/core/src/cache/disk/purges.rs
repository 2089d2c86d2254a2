//! Purges by pattern on the disk tier: the engine cannot list its keys, so a purge by
//! endpoint or prefix is a rule (Varnish's ban) that a later read applies to records
//! stored before it. The rules live in one small file beside the engine's, replaced
//! whole (written aside, then renamed), and are let go once nothing they cover can
//! still be served.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use mdproxy_api::passthrough::key_under;
use serde::{Deserialize, Serialize};

/// How long a rule is kept: longer than any record can be served (the longest
/// default life is a final answer's week fresh plus a month on error).
const KEEP_US: i64 = 90 * 24 * 3_600 * 1_000_000;

/// The rule file's name in `cache.disk_path`.
const FILE: &str = "mdproxy-purges.json";

/// What a purge by pattern covers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Pattern {
    /// Every key under a prefix (`/stock/`, pass-through answers under it included;
    /// `passthrough:` for all of those), as [`key_under`] says.
    Prefix(String),
    /// Every answer of the endpoint with this path template (`/stock/detail/{code}`).
    Endpoint(String),
}

impl Pattern {
    /// Whether `key` (a canonical target) is covered.
    pub fn matches(&self, key: &str) -> bool {
        match self {
            Pattern::Prefix(prefix) => key_under(key, prefix),
            Pattern::Endpoint(template) => {
                let path = key.split_once('?').map_or(key, |(p, _)| p);
                mdproxy_api::router()
                    .route(path)
                    .is_some_and(|r| r.endpoint.path == *template)
            }
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct Rule {
    pattern: Pattern,
    /// Wall-clock microseconds of the purge: records stored before it are covered.
    at_us: i64,
}

/// The rules in force, and their file.
#[derive(Debug)]
pub struct Purges {
    path: PathBuf,
    rules: Mutex<Vec<Rule>>,
}

impl Purges {
    /// Reads the rules kept in `dir`.
    ///
    /// # Errors
    /// When the file is there but cannot be read or parsed: what it purged is
    /// unknown, so the caller must not serve the disk's records.
    pub fn open(dir: &Path) -> std::io::Result<Purges> {
        let path = dir.join(FILE);
        let rules = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(e),
        };
        Ok(Purges {
            path,
            rules: Mutex::new(rules),
        })
    }

    fn rules(&self) -> MutexGuard<'_, Vec<Rule>> {
        self.rules
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Adds a rule covering `pattern` for records stored before `at_us`, and
    /// writes the file.
    ///
    /// # Errors
    /// When the file cannot be written (the rule still applies until a restart).
    pub fn add(&self, pattern: Pattern, at_us: i64) -> std::io::Result<()> {
        let text = {
            let mut rules = self.rules();
            rules.retain(|r| r.at_us > at_us - KEEP_US);
            rules.push(Rule { pattern, at_us });
            serde_json::to_vec(&*rules).expect("rules serialise")
        };
        let aside = self.path.with_extension("json.new");
        std::fs::write(&aside, text)?;
        std::fs::File::open(&aside)?.sync_all()?;
        std::fs::rename(&aside, &self.path)
    }

    /// Whether a record of `key` stored at `stored_at_us` was purged since.
    pub fn covers(&self, key: &str, stored_at_us: i64) -> bool {
        let rules = self.rules();
        rules
            .iter()
            .any(|r| stored_at_us < r.at_us && r.pattern.matches(key))
    }

    /// How many rules are in force.
    pub fn count(&self) -> usize {
        self.rules().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_cover_what_was_stored_before_them_and_survive_a_reopen() {
        let dir = std::env::temp_dir().join(format!("mdproxy-purges-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let purges = Purges::open(&dir).unwrap();
        purges.add(Pattern::Prefix("/stock/".into()), 100).unwrap();
        purges
            .add(Pattern::Endpoint("/market/indices".into()), 100)
            .unwrap();
        let again = Purges::open(&dir).unwrap();
        for p in [&purges, &again] {
            assert!(p.covers("/stock/detail/600519", 99));
            assert!(!p.covers("/stock/detail/600519", 100), "stored after");
            assert!(!p.covers("/fund/detail/510300", 99));
            assert!(p.covers("/market/indices", 99));
            assert!(!p.covers("/market/indices/other", 99));
        }
        std::fs::write(dir.join(FILE), b"{not json").unwrap();
        assert!(Purges::open(&dir).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
