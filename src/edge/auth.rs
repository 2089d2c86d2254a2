//! Client authentication: `Authorization: Bearer <token>` (or the stream's
//! `access_token`) against the configured tokens, each compared in constant time by
//! [`Secret::matches`]. Rate limits per token live in `limit`.

use http::HeaderMap;

use crate::config::Secret;

/// The configured client tokens.
#[derive(Clone, Debug)]
pub struct Tokens {
    tokens: Vec<Secret>,
}

/// Which configured token a request presented (its index in `auth.tokens`); used to
/// key per-token limits without ever carrying the token itself around.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TokenId(pub usize);

impl Tokens {
    /// Wraps the configured tokens.
    pub fn new(tokens: Vec<Secret>) -> Tokens {
        Tokens { tokens }
    }

    /// Checks the request's bearer token. Every configured token is compared, in
    /// constant time, whatever matched first, so timing tells nothing about which
    /// token (or how much of one) was right.
    pub fn check(&self, headers: &HeaderMap) -> Option<TokenId> {
        self.check_value(bearer(headers)?)
    }

    /// Checks a presented token value (from a header or, for EventSource clients that
    /// cannot set headers, the stream's `access_token` parameter, RFC 6750 §2.3).
    pub fn check_value(&self, presented: &str) -> Option<TokenId> {
        let mut found = None;
        for (i, token) in self.tokens.iter().enumerate() {
            if token.matches(presented) {
                found = Some(TokenId(i));
            }
        }
        found
    }
}

/// The token of an `Authorization: Bearer <token>` header (scheme case-insensitive).
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(http::header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn headers(v: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(
            http::header::AUTHORIZATION,
            HeaderValue::from_str(v).unwrap(),
        );
        h
    }

    #[test]
    fn accepts_configured_tokens_only() {
        let t = Tokens::new(vec![Secret::new("alpha"), Secret::new("beta")]);
        assert_eq!(t.check(&headers("Bearer alpha")), Some(TokenId(0)));
        assert_eq!(t.check(&headers("bearer beta")), Some(TokenId(1)));
        assert_eq!(t.check(&headers("Bearer alph")), None);
        assert_eq!(t.check(&headers("Bearer alphaa")), None);
        assert_eq!(t.check(&headers("Basic alpha")), None);
        assert_eq!(t.check(&headers("Bearer ")), None);
        assert_eq!(t.check(&HeaderMap::new()), None);
    }
}
