//! Values that must never be shown: [`Secret`] (a token or password, hidden from
//! `Debug` and compared in constant time) and [`redacted_url`] for URLs that might
//! carry credentials.

use std::fmt;

use constant_time_eq::constant_time_eq;
use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Serialize};

use super::problem::Seg;

/// A secret string (a token or password), held in `secrecy`'s zeroizing box. Its
/// `Debug` never shows the value; it is compared in constant time.
#[derive(Clone, Default)]
pub struct Secret(SecretString);

impl Secret {
    /// Wraps a secret value.
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(SecretString::from(value.into()))
    }

    /// The secret itself; call only where it is used (a header, a comparison).
    pub fn expose(&self) -> &str {
        self.0.expose_secret()
    }

    /// True when no secret is set.
    pub fn is_empty(&self) -> bool {
        self.expose().is_empty()
    }

    /// Whether `presented` equals this secret, compared in constant time (no
    /// timing tells how much of it was right). An empty secret matches nothing.
    pub fn matches(&self, presented: impl AsRef<[u8]>) -> bool {
        !self.is_empty() && constant_time_eq(self.expose().as_bytes(), presented.as_ref())
    }
}

impl PartialEq for Secret {
    fn eq(&self, other: &Secret) -> bool {
        constant_time_eq(self.expose().as_bytes(), other.expose().as_bytes())
    }
}

impl Eq for Secret {}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.is_empty() { "\"\"" } else { "\"***\"" })
    }
}

impl Serialize for Secret {
    /// Serialised only to build the defaults table the file is laid over.
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.expose())
    }
}

impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(Secret::new)
    }
}

/// `url` without the user name and password it may carry (`http://user:pass@host`
/// becomes `http://***@host`), for logs, banners, problems and the status page.
/// Validation refuses credentials in the upstream URLs; this keeps any that reach a
/// display anyway (a config built in code) out of sight.
pub fn redacted_url(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut parsed) if parsed.has_host() => {
            if !parsed.username().is_empty() || parsed.password().is_some() {
                let _ = parsed.set_username("***");
                let _ = parsed.set_password(None);
                parsed.to_string()
            } else {
                url.to_owned()
            }
        }
        // Not a URL with a host (`user:pass@host` reads as scheme `user`): shown
        // only past a credential's `@`, if it has one.
        _ => match url.rsplit_once('@') {
            Some((_, host)) => format!("***@{host}"),
            None => url.to_owned(),
        },
    }
}

/// Whether the key at `path` holds a secret: its value never appears in a problem.
pub(super) fn is_secret(path: &[Seg]) -> bool {
    let leaf = path.iter().rev().find_map(|s| match s {
        Seg::Key(k) => Some(k.as_str()),
        Seg::Index(_) => None,
    });
    matches!(
        leaf,
        Some("token" | "tokens" | "redis_url" | "password" | "sentinel_password")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_do_not_debug_print_and_compare_whole() {
        let s = Secret::new("s3cret-value");
        assert_eq!(format!("{s:?}"), "\"***\"");
        assert_eq!(format!("{:?}", Secret::default()), "\"\"");
        assert!(s.matches("s3cret-value"));
        assert!(!s.matches("s3cret"));
        assert!(!Secret::default().matches(""));
    }

    #[test]
    fn urls_lose_their_credentials() {
        assert_eq!(
            redacted_url("http://user:pa55@10.0.0.5:8080/api/v1"),
            "http://***@10.0.0.5:8080/api/v1"
        );
        assert_eq!(
            redacted_url("https://key@host/api/v1"),
            "https://***@host/api/v1"
        );
        assert_eq!(redacted_url("https://host/api/v1"), "https://host/api/v1");
        assert_eq!(redacted_url("user:pa55@nowhere"), "***@nowhere");
    }
}
