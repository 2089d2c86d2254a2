//! Reads the envelope's `success` flag from an upstream body without parsing the
//! body: a forgiving scan of the top-level object that skips every other member.
//!
//! The real upstream sends some bodies that are not strict JSON (raw control
//! characters inside strings: the heat map, the ETF list, the fund screener), and some
//! bodies are megabytes long. A strict parser would reject the first kind and build a
//! tree of the second only to read one boolean. The scan stops at the `success`
//! member, which the upstream writes first, so it usually reads a dozen bytes.

/// What the scan found at the top level of a body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flag {
    /// `"success": true`.
    Success,
    /// `"success": false`: the upstream reports its own failure.
    Failure,
    /// Not an object with a boolean `success` member (HTML, truncated, another shape).
    Missing,
}

/// Scans `body` for the top-level `success` member.
///
/// Tolerated: raw control characters inside strings, any key order, whitespace,
/// members of any size before it. Not checked: whatever comes after the flag.
///
/// ```
/// use mdproxy_core::upstream::envelope::{Flag, success_flag};
/// assert_eq!(success_flag(br#"{"success":true,"data":[1]}"#), Flag::Success);
/// assert_eq!(success_flag(b"{\"data\":{\"name\":\"a\nb\"},\"success\":false}"), Flag::Failure);
/// assert_eq!(success_flag(br#"{"data":{"success":true}}"#), Flag::Missing);
/// assert_eq!(success_flag(b"<html>"), Flag::Missing);
/// ```
pub fn success_flag(body: &[u8]) -> Flag {
    let mut scan = Scan { body, at: 0 };
    scan.flag().unwrap_or(Flag::Missing)
}

/// Whether `body` is one whole JSON value and nothing after it but whitespace, read
/// as forgivingly as [`success_flag`] (raw control characters inside strings pass):
/// a body cut short, as a connection that closes mid-answer leaves it, is not.
///
/// ```
/// use mdproxy_core::upstream::envelope::is_complete;
/// assert!(is_complete(b"{\"success\":true,\"data\":{\"a\":[1,\"}\"]}}\n"));
/// assert!(!is_complete(br#"{"success": true, "data": {"list": [1, 2"#));
/// assert!(!is_complete(br#"{"success":true} {"#));
/// ```
pub fn is_complete(body: &[u8]) -> bool {
    let mut scan = Scan { body, at: 0 };
    if scan.peek() != Some(b'{') || scan.value().is_none() {
        return false;
    }
    scan.peek().is_none()
}

/// A cursor over the body; every step returns `None` on bytes that cannot continue
/// an object (the scan then reports [`Flag::Missing`]).
struct Scan<'a> {
    body: &'a [u8],
    at: usize,
}

impl Scan<'_> {
    fn flag(&mut self) -> Option<Flag> {
        self.expect(b'{')?;
        loop {
            if self.peek()? == b'}' {
                return None;
            }
            let key = self.string()?;
            self.expect(b':')?;
            if &self.body[key] == b"success" {
                self.skip_whitespace();
                let rest = &self.body[self.at..];
                return if rest.starts_with(b"true") {
                    Some(Flag::Success)
                } else if rest.starts_with(b"false") {
                    Some(Flag::Failure)
                } else {
                    None
                };
            }
            self.value()?;
            match self.next_token()? {
                b',' => {}
                _ => return None,
            }
        }
    }

    fn skip_whitespace(&mut self) {
        while self
            .body
            .get(self.at)
            .is_some_and(|b| b.is_ascii_whitespace())
        {
            self.at += 1;
        }
    }

    /// The next byte that is not whitespace, not consumed.
    fn peek(&mut self) -> Option<u8> {
        self.skip_whitespace();
        self.body.get(self.at).copied()
    }

    /// The next byte that is not whitespace, consumed.
    fn next_token(&mut self) -> Option<u8> {
        let b = self.peek()?;
        self.at += 1;
        Some(b)
    }

    fn expect(&mut self, wanted: u8) -> Option<()> {
        (self.next_token()? == wanted).then_some(())
    }

    /// Where a string's raw bytes lie between its quotes (escapes left as they are:
    /// keys the scan looks for have none). Any other byte, control characters
    /// included, is string content.
    fn string(&mut self) -> Option<std::ops::Range<usize>> {
        self.expect(b'"')?;
        let start = self.at;
        loop {
            // Most of a body is string content: jump to the next quote or escape
            // (memchr's vector search) rather than step over every byte.
            let rest = self.body.get(self.at..)?;
            self.at += memchr::memchr2(b'\\', b'"', rest)?;
            match self.body[self.at] {
                b'\\' => self.at += 2,
                _ => {
                    self.at += 1;
                    return Some(start..self.at - 1);
                }
            }
        }
    }

    /// Skips one value of any kind: strings honour escapes, containers are matched
    /// by depth (brackets inside strings do not count).
    fn value(&mut self) -> Option<()> {
        match self.peek()? {
            b'"' => self.string().map(|_| ()),
            b'{' | b'[' => {
                let mut depth = 0usize;
                loop {
                    match *self.body.get(self.at)? {
                        b'"' => {
                            self.string()?;
                            continue;
                        }
                        b'{' | b'[' => depth += 1,
                        b'}' | b']' => {
                            depth -= 1;
                            if depth == 0 {
                                self.at += 1;
                                return Some(());
                            }
                        }
                        _ => {}
                    }
                    self.at += 1;
                }
            }
            _ => {
                // A number, true, false or null: up to the next delimiter.
                let len = self.body[self.at..]
                    .iter()
                    .position(|b| matches!(b, b',' | b'}' | b']') || b.is_ascii_whitespace())?;
                (len > 0).then(|| self.at += len)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_flag_after_any_member() {
        let cases: &[(&[u8], Flag)] = &[
            (br#" { "success" : true }"#, Flag::Success),
            (
                br#"{"message":"x","data":null,"success":false}"#,
                Flag::Failure,
            ),
            (
                br#"{"data":{"a":[1,{"b":"}]\"{"}],"c":-1.5e3},"success":true}"#,
                Flag::Success,
            ),
            // Raw control characters (a newline, a tab, 0x01) inside strings.
            (
                b"{\"data\":[\"a\nb\tc\x01\"],\"success\":true}",
                Flag::Success,
            ),
            (
                br#"{"data":"\"success\":false","success":true}"#,
                Flag::Success,
            ),
            (br#"{"success":"yes"}"#, Flag::Missing),
            (br#"{"data":[1,2]}"#, Flag::Missing),
            (br#"[{"success":true}]"#, Flag::Missing),
            (br#"{"data":[1,2"#, Flag::Missing),
            (b"", Flag::Missing),
            (br#"{"a" 1,"success":true}"#, Flag::Missing),
        ];
        for (body, flag) in cases {
            assert_eq!(
                success_flag(body),
                *flag,
                "{}",
                String::from_utf8_lossy(body)
            );
        }
    }

    #[test]
    fn a_large_body_before_the_flag_is_skipped_without_recursion() {
        let mut body = b"{\"data\":".to_vec();
        body.extend(std::iter::repeat_n(b'[', 100_000));
        body.extend(std::iter::repeat_n(b']', 100_000));
        body.extend_from_slice(b",\"success\":true}");
        assert_eq!(success_flag(&body), Flag::Success);
    }

    /// The envelope scan, fuzzed: any body is read without a panic, and on a body
    /// that is strict JSON the scan agrees with a JSON parser.
    mod fuzz {
        use proptest::prelude::*;

        use super::*;

        /// Any JSON value, a few levels deep.
        fn json() -> impl Strategy<Value = serde_json::Value> {
            let leaf = prop_oneof![
                Just(serde_json::Value::Null),
                any::<bool>().prop_map(serde_json::Value::Bool),
                any::<i64>().prop_map(|n| serde_json::json!(n)),
                "[ -~\u{4e00}-\u{4e20}\n\t]{0,12}".prop_map(serde_json::Value::String),
            ];
            leaf.prop_recursive(4, 32, 6, |inner| {
                prop_oneof![
                    proptest::collection::vec(inner.clone(), 0..6)
                        .prop_map(serde_json::Value::Array),
                    proptest::collection::btree_map("[a-z\"\\\\]{0,8}", inner, 0..6)
                        .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
                ]
            })
        }

        proptest! {
            #[test]
            fn any_bytes_are_scanned(body in proptest::collection::vec(any::<u8>(), 0..400)) {
                let _ = success_flag(&body);
                let _ = is_complete(&body);
            }

            /// A JSON object, `success` anywhere among its members or absent: the flag
            /// is what a parser reads, and the whole body is complete while any cut
            /// of it is not.
            #[test]
            fn the_scan_agrees_with_a_parser(
                members in proptest::collection::vec(("[a-z]{1,8}", json()), 0..5),
                success in proptest::option::of(any::<bool>()),
                at in any::<proptest::sample::Index>(),
                cut in any::<proptest::sample::Index>(),
            ) {
                let mut object: Vec<(String, serde_json::Value)> = members
                    .into_iter()
                    .filter(|(k, _)| k != "success")
                    .collect();
                if let Some(flag) = success {
                    let at = at.index(object.len() + 1);
                    object.insert(at, ("success".to_owned(), serde_json::Value::Bool(flag)));
                }
                let text = format!(
                    "{{{}}}",
                    object
                        .iter()
                        .map(|(k, v)| format!("{}:{v}", serde_json::Value::String(k.clone())))
                        .collect::<Vec<_>>()
                        .join(",")
                );
                let expected = match success {
                    Some(true) => Flag::Success,
                    Some(false) => Flag::Failure,
                    None => Flag::Missing,
                };
                prop_assert_eq!(success_flag(text.as_bytes()), expected, "{}", text);
                prop_assert!(is_complete(text.as_bytes()), "{}", text);
                let cut = cut.index(text.len());
                prop_assert!(!is_complete(&text.as_bytes()[..cut]), "{}", &text[..cut]);
            }
        }
    }
}
