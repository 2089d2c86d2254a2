//! One parameter value: whether it is what its kind allows, and its canonical form
//! (how it is keyed and forwarded). Which parameters a request may carry, and the
//! key they make together, is `params`'.

use std::borrow::Cow;

use crate::catalog::{MAX_CODES, Param, ParamKind};
use crate::code::{CodeError, CodeRule};
use crate::error::Error;

/// Validates one value and returns its canonical form.
pub(crate) fn canonical<'a>(param: &Param, value: Cow<'a, str>) -> Result<Cow<'a, str>, Error> {
    let name = param.name;
    match param.kind {
        ParamKind::Code(rule) => rule.read(&value).map(Cow::Owned).map_err(|e| match e {
            CodeError::Form => Error::invalid(name, format!("{name} must be {}", rule.forms())),
            contradiction => contradicted(name, &contradiction),
        }),
        ParamKind::Codes(rule) => canonical_codes(name, rule, &value).map(Cow::Owned),
        ParamKind::Ident => {
            // "." and ".." are path segments, not names: the upstream's URL would
            // resolve them to another endpoint's path.
            let ok = (1..=64).contains(&value.len())
                && value
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
                && value != "."
                && value != "..";
            if ok {
                Ok(value)
            } else {
                Err(Error::invalid(
                    name,
                    format!(
                        "{name} must be 1 to 64 letters, digits, '.', '_' or '-', and not '.' or '..'"
                    ),
                ))
            }
        }
        ParamKind::Choice(allowed) => {
            if let Some((_, canonical)) = param.synonyms.iter().find(|(s, _)| *s == value) {
                Ok(Cow::Borrowed(canonical))
            } else if allowed.contains(&value.as_ref()) {
                Ok(value)
            } else {
                Err(Error::invalid(name, must_be(name, allowed)))
            }
        }
        ParamKind::Int { min, max } => canonical_int(name, min, max, value),
        ParamKind::Date => {
            if is_date(&value) {
                Ok(value)
            } else {
                Err(Error::invalid(
                    name,
                    format!("{name} must be a real date from 1900 to 2099 written YYYY-MM-DD"),
                ))
            }
        }
        ParamKind::Period => {
            if is_date(&value) || is_month(&value) {
                Ok(value)
            } else {
                Err(Error::invalid(
                    name,
                    format!(
                        "{name} must be a real month written YYYYMM or a real date written YYYY-MM-DD"
                    ),
                ))
            }
        }
        ParamKind::Text { max_chars } => {
            if value.chars().count() > max_chars {
                Err(Error::invalid(
                    name,
                    format!("{name} must be at most {max_chars} characters"),
                ))
            } else if value.chars().any(char::is_control) {
                Err(Error::invalid(
                    name,
                    format!("{name} must not contain control characters"),
                ))
            } else {
                Ok(value)
            }
        }
    }
}

/// `market must be CN_A`, `period must be one of day, week, month`.
fn must_be(name: &str, allowed: &[&str]) -> String {
    match allowed {
        [only] => format!("{name} must be {only}"),
        _ => format!("{name} must be one of {}", allowed.join(", ")),
    }
}

/// A comma-separated list of codes, each canonical, at most [`MAX_CODES`].
fn canonical_codes(name: &str, rule: CodeRule, value: &str) -> Result<String, Error> {
    let mut out = String::with_capacity(value.len() + 16);
    for (count, code) in value.split(',').enumerate() {
        if count == MAX_CODES {
            return Err(Error::invalid(
                name,
                format!("{name} holds more than {MAX_CODES} codes"),
            ));
        }
        let code = rule.read(code.trim()).map_err(|e| match e {
            CodeError::Form => Error::invalid(
                name,
                format!(
                    "{name} must be comma-separated codes, each {}",
                    rule.forms()
                ),
            ),
            contradiction => contradicted(name, &contradiction),
        })?;
        if !out.is_empty() {
            out.push(',');
        }
        out.push_str(&code);
    }
    Ok(out)
}

/// An integer within `min..=max`, leading zeros dropped ("007" and "7" are one key).
fn canonical_int<'a>(
    name: &str,
    min: i64,
    max: i64,
    value: Cow<'a, str>,
) -> Result<Cow<'a, str>, Error> {
    let parsed =
        (!value.is_empty() && value.len() <= 12 && value.bytes().all(|b| b.is_ascii_digit()))
            .then(|| value.parse::<i64>().ok())
            .flatten();
    match parsed {
        Some(n) if (min..=max).contains(&n) => {
            if value.starts_with('0') && value.len() > 1 {
                Ok(Cow::Owned(n.to_string()))
            } else {
                Ok(value)
            }
        }
        _ => Err(Error::invalid(
            name,
            format!("{name} must be an integer from {min} to {max}"),
        )),
    }
}

/// The error for a code whose named exchange its digits contradict.
fn contradicted(name: &str, error: &CodeError) -> Error {
    let CodeError::Exchange {
        digits,
        named,
        listed,
    } = error
    else {
        return Error::invalid(name, format!("{name} is not a code"));
    };
    Error::invalid(
        name,
        format!(
            "{name} names the exchange {named}, but {digits} is listed on {listed}: write {digits} or {digits}.{listed}"
        ),
    )
}

/// `YYYY-MM-DD`, a date that exists, from 1900 to 2099 (market data starts in 1990:
/// a wider range only lets a typo ask for centuries).
pub(crate) fn is_date(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 10
        && b[4] == b'-'
        && b[7] == b'-'
        && b.iter()
            .enumerate()
            .all(|(i, c)| i == 4 || i == 7 || c.is_ascii_digit())
        && chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d")
            .is_ok_and(|d| (1900..=2099).contains(&chrono::Datelike::year(&d)))
}

/// `YYYYMM` with a month from 01 to 12.
fn is_month(s: &str) -> bool {
    s.len() == 6
        && s.bytes().all(|b| b.is_ascii_digit())
        && (1..=12).contains(&s[4..].parse::<u32>().unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_and_months_must_exist() {
        assert!(is_date("2024-02-29"));
        assert!(!is_date("2023-02-29"));
        assert!(!is_date("2024-6-30"));
        assert!(!is_date("0292-03-16"), "centuries before any market");
        assert!(is_month("202412"));
        assert!(!is_month("202413"));
        assert!(!is_month("2024-12"));
    }

    /// Defect: "." and ".." passed as an identifier, and the upstream's URL
    /// resolved them, so `/news/topic/library/detail/..` fetched another path.
    #[test]
    fn an_identifier_is_never_a_dot_segment() {
        let id = Param::new("themeId", ParamKind::Ident);
        for bad in [".", "..", "", "a/b", "a b"] {
            assert!(canonical(&id, bad.into()).is_err(), "{bad:?}");
        }
        for good in ["T1001", "...", ".a", "a.", "..b", "x_y-z.1"] {
            assert_eq!(canonical(&id, good.into()).unwrap(), good);
        }
    }

    #[test]
    fn integers_are_keyed_without_leading_zeros() {
        let page = Param::new("page", ParamKind::Int { min: 0, max: 9 });
        assert_eq!(canonical(&page, "007".into()).unwrap(), "7");
        assert!(canonical(&page, "10".into()).is_err());
        assert!(canonical(&page, "-1".into()).is_err());
    }
}
