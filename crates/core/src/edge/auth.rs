//! Client authentication the way the real API takes it: `Authorization: Bearer
//! <key>`, an `x-api-key` header, or an `x-api-key` query parameter (and the stream's
//! `access_token`, for EventSource clients that cannot set headers), checked against
//! the configured tokens, each compared in constant time by [`Secret::matches`].
//! Rate limits per token live in `limit`.

use std::borrow::Cow;
use std::sync::Arc;

use http::HeaderMap;

use crate::edge::head::Head;
use mdproxy_api::params::API_KEY;
use mdproxy_config::Secret;

/// The configured client tokens.
#[derive(Clone, Debug)]
pub struct Tokens {
    /// Shared: an MCP request carries its caller's ([`secret`](Self::secret)).
    tokens: Vec<Arc<Secret>>,
    /// Each token's identity across reloads ([`stable`](Self::stable)).
    ids: Vec<usize>,
}

/// Which configured token a request presented (its index in `auth.tokens`); used to
/// key per-token limits without ever carrying the token itself around.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TokenId(pub usize);

impl Tokens {
    /// Wraps the configured tokens.
    pub fn new(tokens: Vec<Secret>) -> Tokens {
        let ids = tokens
            .iter()
            .map(|t| fingerprint(t.expose().as_bytes()))
            .collect();
        let tokens = tokens.into_iter().map(Arc::new).collect();
        Tokens { tokens, ids }
    }

    /// Checks the key a request presents (see [`presented`]).
    pub fn check(&self, head: &Head<'_>, query: Option<&str>, stream: bool) -> Option<TokenId> {
        self.check_value(&presented(head, query, stream)?)
    }

    /// The identity of the token at `index` that outlasts a reload: what the hub
    /// files streams under. An index does not: a reload that removes a token
    /// renumbers those after it, so streams filed by index were counted against
    /// another token, and a revoked token's were not the ones closed.
    pub fn stable(&self, index: usize) -> usize {
        self.ids.get(index).copied().unwrap_or(usize::MAX)
    }

    /// The token at `index` (empty past the end), shared without a copy: for the
    /// MCP endpoint, which binds a session kept for the fleet to a digest of it.
    pub fn secret(&self, index: usize) -> Arc<Secret> {
        self.tokens.get(index).cloned().unwrap_or_default()
    }

    /// The [stable](Self::stable) identities of tokens here that `next` no longer
    /// has (a reload revoked them). Compared in constant time, like every token
    /// comparison.
    pub fn revoked_by(&self, next: &Tokens) -> Vec<usize> {
        self.tokens
            .iter()
            .zip(&self.ids)
            .filter(|(token, _)| next.check_value(token.expose().as_bytes()).is_none())
            .map(|(_, id)| *id)
            .collect()
    }

    /// Checks a presented token value. Every configured token is compared, in
    /// constant time, whatever matched first, so timing tells nothing about which
    /// token (or how much of one) was right.
    pub fn check_value(&self, presented: &[u8]) -> Option<TokenId> {
        let mut found = None;
        for (i, token) in self.tokens.iter().enumerate() {
            if token.matches(presented) {
                found = Some(TokenId(i));
            }
        }
        found
    }
}

/// A token's identity: a hash of it keyed at random for this process (the same
/// token, the same identity, whatever its place in the list; it tells nothing of
/// the token outside the process).
fn fingerprint(token: &[u8]) -> usize {
    use std::hash::BuildHasher;
    static KEY: std::sync::LazyLock<std::hash::RandomState> =
        std::sync::LazyLock::new(std::hash::RandomState::new);
    KEY.hash_one(token) as usize
}

/// The key a request presents, the first of: `Authorization: Bearer`, the
/// `x-api-key` header, the `x-api-key` query parameter, and (on the stream only)
/// RFC 6750's `access_token` query parameter. The first form present decides: a
/// wrong bearer token is not rescued by a right query parameter. Compared as bytes:
/// a configured token is visible ASCII (the configuration says so), so a value that
/// is not matches none.
pub fn presented<'a>(
    head: &Head<'a>,
    query: Option<&'a str>,
    stream: bool,
) -> Option<Cow<'a, [u8]>> {
    if let Some(value) = head.authorization {
        return bearer_value(value).map(Cow::Borrowed);
    }
    if let Some(value) = head.api_key {
        return Some(Cow::Borrowed(value.as_bytes().trim_ascii()));
    }
    let query = query?;
    let from_query = |name: &str| {
        form_urlencoded::parse(query.as_bytes())
            .find(|(k, _)| k == name)
            .map(|(_, v)| v)
    };
    let value =
        from_query(API_KEY).or_else(|| stream.then(|| from_query("access_token")).flatten())?;
    Some(match value {
        Cow::Borrowed(v) => Cow::Borrowed(v.as_bytes()),
        Cow::Owned(v) => Cow::Owned(v.into_bytes()),
    })
}

/// The token of an `Authorization: Bearer <token>` header (scheme case-insensitive),
/// as bytes.
pub fn bearer(headers: &HeaderMap) -> Option<&[u8]> {
    bearer_value(headers.get(http::header::AUTHORIZATION)?)
}

/// The token of one `Authorization` value, when its scheme is Bearer: `Bearer`
/// (any case), one space, then the token, blanks around it ignored. Read as bytes,
/// on every request: a `to_str` check, a string search and a Unicode trim cost
/// about 250 instructions more.
fn bearer_value(value: &http::HeaderValue) -> Option<&[u8]> {
    const SCHEME: &[u8] = b"bearer ";
    let bytes = value.as_bytes();
    if bytes.len() <= SCHEME.len() || !bytes[..SCHEME.len()].eq_ignore_ascii_case(SCHEME) {
        return None;
    }
    let token = bytes[SCHEME.len()..].trim_ascii();
    (!token.is_empty()).then_some(token)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (name, value) in pairs {
            h.insert(*name, HeaderValue::from_str(value).unwrap());
        }
        h
    }

    fn bearer_headers(v: &str) -> HeaderMap {
        headers(&[("authorization", v)])
    }

    #[test]
    fn accepts_configured_tokens_only() {
        let t = Tokens::new(vec![Secret::new("alpha"), Secret::new("beta")]);
        let check = |h: &HeaderMap| t.check(&Head::read(h), None, false);
        assert_eq!(check(&bearer_headers("Bearer alpha")), Some(TokenId(0)));
        assert_eq!(check(&bearer_headers("bearer beta")), Some(TokenId(1)));
        assert_eq!(check(&bearer_headers("Bearer alph")), None);
        assert_eq!(check(&bearer_headers("Bearer alphaa")), None);
        assert_eq!(check(&bearer_headers("Basic alpha")), None);
        assert_eq!(check(&bearer_headers("Bearer ")), None);
        assert_eq!(check(&bearer_headers("BEARER   alpha  ")), Some(TokenId(0)));
        assert_eq!(check(&bearer_headers("Bearer\talpha")), None);
        assert_eq!(check(&bearer_headers("Beareralpha")), None);
        assert_eq!(check(&bearer_headers("Bearer")), None);
        assert_eq!(check(&HeaderMap::new()), None);
    }

    #[test]
    fn takes_the_three_documented_forms_in_order() {
        let t = Tokens::new(vec![Secret::new("alpha"), Secret::new("beta")]);
        let none = HeaderMap::new();
        assert_eq!(
            t.check(&Head::read(&headers(&[("x-api-key", "beta")])), None, false),
            Some(TokenId(1))
        );
        assert_eq!(
            t.check(&Head::read(&none), Some("a=1&x-api-key=alpha"), false),
            Some(TokenId(0))
        );
        assert_eq!(
            t.check(&Head::read(&none), Some("x-api-key=alp%68a"), false),
            Some(TokenId(0))
        );
        // The first form present decides.
        let wrong_bearer = bearer_headers("Bearer nope");
        assert_eq!(
            t.check(&Head::read(&wrong_bearer), Some("x-api-key=alpha"), false),
            None
        );
        let wrong_header = headers(&[("x-api-key", "nope")]);
        assert_eq!(
            t.check(&Head::read(&wrong_header), Some("x-api-key=alpha"), false),
            None
        );
        // A reload that drops "alpha" revokes it alone; "beta", now first, keeps
        // its identity (its index moved).
        let next = Tokens::new(vec![Secret::new("beta"), Secret::new("gamma")]);
        assert_eq!(t.revoked_by(&next), [t.stable(0)]);
        assert_eq!(next.stable(0), t.stable(1));
        assert_ne!(next.stable(1), t.stable(0));
        // `access_token` only on the stream.
        assert_eq!(
            t.check(&Head::read(&none), Some("access_token=alpha"), false),
            None
        );
        assert_eq!(
            t.check(&Head::read(&none), Some("access_token=alpha"), true),
            Some(TokenId(0))
        );
    }
}
