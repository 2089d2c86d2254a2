//! What a purge drops: one key, every key of an endpoint, or every key under a
//! prefix; and its message, the words every node of a cluster reads to drop the
//! same keys from its own cache (the shared store's keys are dropped where the
//! purge was made).

use mdproxy_api::catalog::{Endpoint, catalog};
use mdproxy_api::params::PASSTHROUGH_KEY;
use mdproxy_api::passthrough::key_under;

/// Which cached answers a purge drops.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Purge {
    /// That key (a canonical target).
    Key(String),
    /// Every answer of that endpoint.
    Endpoint(&'static Endpoint),
    /// Every key under a prefix (like a Varnish ban on the URL): of a path (`/stock/`,
    /// pass-through answers under it included) or `passthrough:` (every
    /// pass-through answer).
    Prefix(String),
}

impl Purge {
    /// Every pass-through answer (the admin's `endpoint=passthrough`).
    pub fn passthrough() -> Purge {
        Purge::Prefix(PASSTHROUGH_KEY.to_owned())
    }

    /// Whether it drops `key`.
    pub fn matches(&self, key: &str) -> bool {
        match self {
            Purge::Key(k) => k == key,
            Purge::Prefix(p) => key_under(key, p),
            Purge::Endpoint(e) => {
                let path = key.split_once('?').map_or(key, |(p, _)| p);
                mdproxy_api::router()
                    .route(path)
                    .is_some_and(|r| r.endpoint.id == e.id)
            }
        }
    }

    /// What every key it drops starts with (where a scan of the shared store
    /// begins): a template's text up to its first parameter.
    pub fn prefix(&self) -> &str {
        match self {
            Purge::Key(k) | Purge::Prefix(k) => k,
            Purge::Endpoint(e) => e.path.split('{').next().unwrap_or_default(),
        }
    }

    /// Where the scans of the shared store begin: [`prefix`](Self::prefix), and for
    /// a prefix of paths the pass-through keys under it as well.
    pub fn scan_prefixes(&self) -> Vec<String> {
        let prefix = self.prefix();
        match self {
            Purge::Prefix(p) if p.starts_with('/') => {
                vec![prefix.to_owned(), format!("{PASSTHROUGH_KEY}{prefix}")]
            }
            _ => vec![prefix.to_owned()],
        }
    }

    /// Its message to the other nodes: a key as it is (keys start with `/`), else
    /// `endpoint <template>` or `prefix <prefix>`.
    pub fn message(&self) -> String {
        match self {
            Purge::Key(k) => k.clone(),
            Purge::Endpoint(e) => format!("endpoint {}", e.path),
            Purge::Prefix(p) => format!("prefix {p}"),
        }
    }

    /// The purge a message names (`None` for words this version does not know).
    pub fn from_message(message: &str) -> Option<Purge> {
        if message.starts_with('/') {
            return Some(Purge::Key(message.to_owned()));
        }
        match message.split_once(' ')? {
            ("prefix", p) if p.starts_with('/') || p == PASSTHROUGH_KEY => {
                Some(Purge::Prefix(p.to_owned()))
            }
            ("endpoint", template) => catalog()
                .endpoints()
                .iter()
                .find(|e| e.path == template)
                .map(Purge::Endpoint),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn detail() -> &'static Endpoint {
        catalog()
            .endpoints()
            .iter()
            .find(|e| e.path == "/stock/detail/{code}")
            .unwrap()
    }

    /// Every purge goes to the other nodes and back as the same purge.
    #[test]
    fn a_purge_travels_as_its_message() {
        for purge in [
            Purge::Key("/stock/detail/600519".into()),
            Purge::Prefix("/stock/".into()),
            Purge::passthrough(),
            Purge::Endpoint(detail()),
        ] {
            assert_eq!(Purge::from_message(&purge.message()), Some(purge));
        }
        assert_eq!(Purge::from_message("endpoint /no/such"), None);
        assert_eq!(Purge::from_message("prefix stock"), None);
        assert_eq!(Purge::from_message("ban everything"), None);
    }

    /// An endpoint's purge takes its own keys only, and scans from its template's
    /// fixed part.
    #[test]
    fn an_endpoint_purge_takes_its_own_keys() {
        let purge = Purge::Endpoint(detail());
        assert_eq!(purge.prefix(), "/stock/detail/");
        assert!(purge.matches("/stock/detail/600519"));
        assert!(!purge.matches("/stock/kline?code=600519&period=day"));
        assert!(Purge::Prefix("/stock/".into()).matches("/stock/kline?code=1"));
        assert!(!Purge::Key("/a".into()).matches("/ab"));
    }

    /// A prefix of paths takes the pass-through answers under it, and scans for
    /// them; the pass-through purge takes those answers only.
    #[test]
    fn a_prefix_takes_the_pass_through_answers_under_it() {
        let root = Purge::Prefix("/".into());
        assert!(root.matches("/stock/kline?code=1"));
        assert!(root.matches("passthrough:/market/newer?x=1"));
        assert_eq!(root.scan_prefixes(), ["/", "passthrough:/"]);
        let all = Purge::passthrough();
        assert!(all.matches("passthrough:/market/newer?x=1"));
        assert!(!all.matches("/market/indices"));
        assert_eq!(all.scan_prefixes(), ["passthrough:"]);
        assert_eq!(
            Purge::Endpoint(detail()).scan_prefixes(),
            ["/stock/detail/"]
        );
    }
}
