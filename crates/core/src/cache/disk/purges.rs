//! Purges by pattern on the disk tier: the engine cannot list its keys, so a purge by
//! endpoint or prefix is a rule (Varnish's ban) that a later read applies to records
//! stored before it. A key's purge is a rule too, beside the engine's delete: the
//! delete lasts a restart only once foyer's tombstone log has been written, which a
//! failing disk or a kill in the next milliseconds prevents. The rules live in one
//! small file beside the engine's, replaced whole (written aside, synced, then
//! renamed), and are let go once nothing they cover can still be served.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use mdproxy_api::passthrough::key_under;
use serde::{Deserialize, Serialize};

/// How long a rule is kept: longer than any record can be served (the longest
/// default life is a final answer's week fresh plus a month on error).
const KEEP_US: i64 = 90 * 24 * 3_600 * 1_000_000;

/// Whether a record stored at `stored_at_us` (wall-clock microseconds) is older
/// than rules are kept: a purge that covered it may be forgotten, so it is not
/// served (a record the configuration keeps usable longer, up to a year, is
/// fetched again after 90 days rather than risk a purged answer).
pub fn outlived(stored_at_us: i64) -> bool {
    let now_us = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX));
    stored_at_us < now_us.saturating_sub(KEEP_US)
}

/// The rule file's name in `cache.disk_path`.
const FILE: &str = "mdproxy-purges.json";

/// The most keys' rules kept; past it the oldest go. A key's rule matters only
/// while the engine's tombstone of it may be missing (milliseconds, unless the disk
/// failed), so the oldest are the safest to let go, and a bulk purge of keys keeps
/// the file (rewritten at each purge) small.
const MAX_KEY_RULES: usize = 10_000;

/// What a purge by pattern covers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Pattern {
    /// Every key under a prefix (`/stock/`, pass-through answers under it included;
    /// `passthrough:` for all of those), as [`key_under`] says.
    Prefix(String),
    /// Every answer of the endpoint with this path template (`/stock/detail/{code}`).
    Endpoint(String),
    /// One key (a canonical target).
    Key(String),
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
            Pattern::Key(one) => key == one,
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
    rules: Mutex<Rules>,
    /// Held while the file is written: one write at a time, each of every rule
    /// added before it, so the file is never left older than a write that ended.
    writing: Mutex<()>,
}

/// The rules by endpoint or prefix, read in turn; keys' rules by key (a read looks
/// up its own).
#[derive(Debug, Default)]
struct Rules {
    patterns: Vec<Rule>,
    keys: HashMap<String, i64>,
}

impl Rules {
    fn from_list(list: Vec<Rule>) -> Rules {
        let mut rules = Rules::default();
        for rule in list {
            match rule.pattern {
                Pattern::Key(key) => {
                    let at = rules.keys.entry(key).or_insert(rule.at_us);
                    *at = (*at).max(rule.at_us);
                }
                pattern => rules.patterns.push(Rule {
                    pattern,
                    at_us: rule.at_us,
                }),
            }
        }
        rules
    }

    fn to_list(&self) -> Vec<Rule> {
        let keys = self.keys.iter().map(|(key, at_us)| Rule {
            pattern: Pattern::Key(key.clone()),
            at_us: *at_us,
        });
        self.patterns.iter().cloned().chain(keys).collect()
    }

    /// Adds a rule, letting go of those past [`KEEP_US`] and of the oldest keys'
    /// past [`MAX_KEY_RULES`].
    fn add(&mut self, pattern: Pattern, at_us: i64) {
        let kept_from = at_us - KEEP_US;
        self.patterns.retain(|r| r.at_us > kept_from);
        self.keys.retain(|_, at| *at > kept_from);
        match pattern {
            Pattern::Key(key) => {
                self.keys.insert(key, at_us);
                if self.keys.len() > MAX_KEY_RULES
                    && let Some(oldest) = self
                        .keys
                        .iter()
                        .min_by_key(|(_, at)| **at)
                        .map(|(key, _)| key.clone())
                {
                    self.keys.remove(&oldest);
                }
            }
            pattern => self.patterns.push(Rule { pattern, at_us }),
        }
    }
}

impl Purges {
    /// Reads the rules kept in `dir`.
    ///
    /// # Errors
    /// When the file is there but cannot be read or parsed: what it purged is
    /// unknown, so the caller must not serve the disk's records.
    pub fn open(dir: &Path) -> std::io::Result<Purges> {
        let path = dir.join(FILE);
        let list = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(e),
        };
        Ok(Purges {
            path,
            rules: Mutex::new(Rules::from_list(list)),
            writing: Mutex::new(()),
        })
    }

    fn rules(&self) -> MutexGuard<'_, Rules> {
        self.rules
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Adds a rule covering `pattern` for records stored before `at_us`: reads
    /// apply it from now on; [`Purges::save`] keeps it across a restart.
    pub fn add(&self, pattern: Pattern, at_us: i64) {
        self.rules().add(pattern, at_us);
    }

    /// Writes every rule in force to the file (written aside, synced, renamed over
    /// the old). Blocking: the disk tier calls it on the blocking pool, since a
    /// sync can take a slow disk hundreds of milliseconds.
    ///
    /// # Errors
    /// When the file cannot be written (the rules still apply until a restart).
    pub fn save(&self) -> std::io::Result<()> {
        let _writing = self
            .writing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let text = serde_json::to_vec(&self.rules().to_list()).expect("rules serialise");
        let aside = self.path.with_extension("json.new");
        std::fs::write(&aside, text)?;
        std::fs::File::open(&aside)?.sync_all()?;
        std::fs::rename(&aside, &self.path)
    }

    /// Whether a record of `key` stored at `stored_at_us` was purged since (by a
    /// rule still kept: see [`outlived`] for older records).
    pub fn covers(&self, key: &str, stored_at_us: i64) -> bool {
        let rules = self.rules();
        // Most of the time there is no key's rule: no hash then.
        (!rules.keys.is_empty() && rules.keys.get(key).is_some_and(|at| stored_at_us < *at))
            || rules
                .patterns
                .iter()
                .any(|r| stored_at_us < r.at_us && r.pattern.matches(key))
    }

    /// How many rules are in force.
    pub fn count(&self) -> usize {
        let rules = self.rules();
        rules.patterns.len() + rules.keys.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Defect: rules go after 90 days, and a record whose lifetimes the config
    /// stretched past that (up to a year) was served again once the rule that
    /// purged it had gone. A record older than the rules are kept is not served.
    #[test]
    fn a_record_older_than_the_rules_is_not_served() {
        let now_us = crate::cache::purged::Stamp::now().as_micros();
        assert!(outlived(now_us - KEEP_US - 1_000_000));
        assert!(!outlived(now_us - KEEP_US + 60_000_000));
        assert!(!outlived(now_us));
    }

    #[test]
    fn rules_cover_what_was_stored_before_them_and_survive_a_reopen() {
        let dir = std::env::temp_dir().join(format!("mdproxy-purges-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let purges = Purges::open(&dir).unwrap();
        purges.add(Pattern::Prefix("/stock/".into()), 100);
        purges.add(Pattern::Endpoint("/market/indices".into()), 100);
        purges.save().unwrap();
        let again = Purges::open(&dir).unwrap();
        for p in [&purges, &again] {
            assert!(p.covers("/stock/detail/600519", 99));
            assert!(!p.covers("/stock/detail/600519", 100), "stored after");
            assert!(!p.covers("/fund/detail/510300", 99));
            assert!(p.covers("/market/indices", 99));
            assert!(!p.covers("/market/indices/other", 99));
        }
        purges.add(Pattern::Key("/fund/detail/510300".into()), 100);
        purges.save().unwrap();
        let again = Purges::open(&dir).unwrap();
        assert!(again.covers("/fund/detail/510300", 99), "a key's rule");
        assert!(!again.covers("/fund/detail/510300", 100), "stored after");
        assert!(!again.covers("/fund/detail/510301", 99));
        assert_eq!(again.count(), 3);
        std::fs::write(dir.join(FILE), b"{not json").unwrap();
        assert!(Purges::open(&dir).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Defect: two purges at once wrote the same aside file (one rename failed, and
    /// its purge counted as unsaved), each with the rules as they stood when it
    /// began (the file could end with the older list). Writes now take turns, each
    /// with every rule added before it.
    #[test]
    fn purges_saved_at_once_all_outlast_a_reopen() {
        let dir = std::env::temp_dir().join(format!("mdproxy-purges-race-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let purges = std::sync::Arc::new(Purges::open(&dir).unwrap());
        let threads: Vec<_> = (0..8)
            .map(|t| {
                let purges = std::sync::Arc::clone(&purges);
                std::thread::spawn(move || {
                    for n in 0..20 {
                        purges.add(Pattern::Key(format!("/k/{t}/{n}")), 100);
                        purges.save().unwrap();
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        let again = Purges::open(&dir).unwrap();
        assert_eq!(again.count(), 160);
        assert!((0..8).all(|t| (0..20).all(|n| again.covers(&format!("/k/{t}/{n}"), 99))));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Past [`MAX_KEY_RULES`] the oldest key's rule goes; a key purged again keeps
    /// its latest; rules past [`KEEP_US`] go.
    #[test]
    fn keys_rules_are_bounded_oldest_first() {
        let mut rules = Rules::default();
        for n in 0..=MAX_KEY_RULES as i64 {
            rules.add(Pattern::Key(format!("/k/{n}")), 1_000 + n);
        }
        assert_eq!(rules.keys.len(), MAX_KEY_RULES);
        assert!(!rules.keys.contains_key("/k/0"), "the oldest went");
        rules.add(Pattern::Key("/k/5".into()), 50_000);
        assert_eq!(rules.keys["/k/5"], 50_000);
        rules.add(Pattern::Prefix("/stock/".into()), KEEP_US + 3_000);
        // Kept: those stored after 3,000 (/k/2001 on), and /k/5 again.
        assert_eq!(rules.keys.len(), 8_001, "rules past KEEP_US went");
        let listed = Rules::from_list(rules.to_list());
        assert_eq!(listed.keys, rules.keys);
        assert_eq!(listed.patterns.len(), 1);
    }
}
