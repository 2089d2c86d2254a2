//! Client authentication the way the real API takes it: `Authorization: Bearer
//! <key>`, an `x-api-key` header, or an `x-api-key` query parameter (and the stream's
//! `access_token`, for EventSource clients that cannot set headers), checked against
//! the configured tokens, each compared in constant time by [`Secret::matches`].
//! Rate limits per token live in `limit`.

use std::borrow::Cow;

use http::HeaderMap;

use crate::api::params::API_KEY;
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

    /// Checks the key a request presents (see [`presented`]).
    pub fn check(&self, headers: &HeaderMap, query: Option<&str>, stream: bool) -> Option<TokenId> {
        self.check_value(&presented(headers, query, stream)?)
    }

    /// The indices of tokens here that `next` no longer has (a reload revoked
    /// them). Compared in constant time, like every token comparison.
    pub fn revoked_by(&self, next: &Tokens) -> Vec<usize> {
        self.tokens
            .iter()
            .enumerate()
            .filter(|(_, token)| next.check_value(token.expose()).is_none())
            .map(|(i, _)| i)
            .collect()
    }

    /// Checks a presented token value. Every configured token is compared, in
    /// constant time, whatever matched first, so timing tells nothing about which
    /// token (or how much of one) was right.
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

/// The key a request presents, the first of: `Authorization: Bearer`, the
/// `x-api-key` header, the `x-api-key` query parameter, and (on the stream only)
/// RFC 6750's `access_token` query parameter. The first form present decides: a
/// wrong bearer token is not rescued by a right query parameter.
pub fn presented<'a>(
    headers: &'a HeaderMap,
    query: Option<&'a str>,
    stream: bool,
) -> Option<Cow<'a, str>> {
    if let Some(value) = headers.get(http::header::AUTHORIZATION) {
        return bearer_value(value).map(Cow::Borrowed);
    }
    if let Some(value) = headers.get(API_KEY) {
        return value.to_str().ok().map(str::trim).map(Cow::Borrowed);
    }
    let query = query?;
    let from_query = |name: &str| {
        form_urlencoded::parse(query.as_bytes())
            .find(|(k, _)| k == name)
            .map(|(_, v)| v)
    };
    from_query(API_KEY).or_else(|| stream.then(|| from_query("access_token")).flatten())
}

/// The token of an `Authorization: Bearer <token>` header (scheme case-insensitive).
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    bearer_value(headers.get(http::header::AUTHORIZATION)?)
}

/// The token of one `Authorization` value, when its scheme is Bearer: `Bearer`
/// (any case), one space, then the token, blanks around it ignored. Read as bytes
/// (a value that is not visible ASCII has no token): on every request, where a
/// string search and a Unicode trim cost about 150 instructions more.
fn bearer_value(value: &http::HeaderValue) -> Option<&str> {
    const SCHEME: &[u8] = b"bearer ";
    let value = value.to_str().ok()?;
    let bytes = value.as_bytes();
    if bytes.len() <= SCHEME.len() || !bytes[..SCHEME.len()].eq_ignore_ascii_case(SCHEME) {
        return None;
    }
    // The scheme and its space are ASCII, so the rest starts on a char boundary.
    let token = value[SCHEME.len()..].trim_ascii();
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
        let check = |h: &HeaderMap| t.check(h, None, false);
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
            t.check(&headers(&[("x-api-key", "beta")]), None, false),
            Some(TokenId(1))
        );
        assert_eq!(
            t.check(&none, Some("a=1&x-api-key=alpha"), false),
            Some(TokenId(0))
        );
        assert_eq!(
            t.check(&none, Some("x-api-key=alp%68a"), false),
            Some(TokenId(0))
        );
        // The first form present decides.
        let wrong_bearer = bearer_headers("Bearer nope");
        assert_eq!(t.check(&wrong_bearer, Some("x-api-key=alpha"), false), None);
        let wrong_header = headers(&[("x-api-key", "nope")]);
        assert_eq!(t.check(&wrong_header, Some("x-api-key=alpha"), false), None);
        // A reload that drops "alpha" revokes index 0 only.
        let next = Tokens::new(vec![Secret::new("beta"), Secret::new("gamma")]);
        assert_eq!(t.revoked_by(&next), [0]);
        // `access_token` only on the stream.
        assert_eq!(t.check(&none, Some("access_token=alpha"), false), None);
        assert_eq!(
            t.check(&none, Some("access_token=alpha"), true),
            Some(TokenId(0))
        );
    }
}
