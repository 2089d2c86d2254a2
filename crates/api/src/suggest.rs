//! Near names for a misspelt one: what "did you mean ...?" offers, for configuration
//! keys and variables, query parameters and paths alike.

/// The names in `candidates` closest to `word`, if any is close: first those that
/// hold all of its words in order (a word left out: `live_fresh_secs` for
/// `live_session_fresh_secs`), else those a few typos away.
pub fn suggest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
    fn words(name: &str) -> Vec<String> {
        name.to_ascii_lowercase()
            .split(['_', '-', '.', '/'])
            .filter(|w| !w.is_empty())
            .map(str::to_owned)
            .collect()
    }
    let candidates: Vec<&str> = candidates.into_iter().collect();
    let wanted = words(word);
    let mut holding: Vec<&str> = candidates
        .iter()
        .copied()
        .filter(|c| {
            let mut theirs = words(c).into_iter();
            !wanted.is_empty() && wanted.iter().all(|w| theirs.any(|t| t == *w))
        })
        .collect();
    if !holding.is_empty() {
        holding.sort_by_key(|c| (c.len(), *c));
        holding.truncate(3);
        return holding;
    }
    let word = word.to_ascii_lowercase();
    let mut scored: Vec<(usize, &str)> = candidates
        .into_iter()
        .map(|c| {
            (
                strsim::damerau_levenshtein(&word, &c.to_ascii_lowercase()),
                c,
            )
        })
        .filter(|&(d, c)| d <= (c.len() / 3).max(2))
        .collect();
    scored.sort();
    let Some(&(best, _)) = scored.first() else {
        return Vec::new();
    };
    scored
        .into_iter()
        .take_while(|&(d, _)| d <= best + 1)
        .take(3)
        .map(|(_, c)| c)
        .collect()
}

/// ` (did you mean a, b or c?)`, or nothing for no names.
pub fn did_you_mean(names: &[String]) -> String {
    match names {
        [] => String::new(),
        [one] => format!(" (did you mean {one}?)"),
        [init @ .., last] => format!(" (did you mean {} or {last}?)", init.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggestions_are_near_names_only() {
        assert_eq!(suggest("listn", ["listen", "keep_alive"]), ["listen"]);
        assert!(suggest("zzz", ["listen", "keep_alive"]).is_empty());
        assert_eq!(
            suggest(
                "MDPROXY_FRESHNESS_CLASSES_LIVE_FRESH_SECS",
                [
                    "MDPROXY_FRESHNESS_CLASSES_LIVE_ERROR_SECS",
                    "MDPROXY_FRESHNESS_CLASSES_LIVE_SESSION_FRESH_SECS",
                    "MDPROXY_FRESHNESS_CLASSES_LIVE_CLOSED_FRESH_SECS",
                    "MDPROXY_FRESHNESS_CLASSES_NEWS_SESSION_FRESH_SECS",
                ]
            ),
            [
                "MDPROXY_FRESHNESS_CLASSES_LIVE_CLOSED_FRESH_SECS",
                "MDPROXY_FRESHNESS_CLASSES_LIVE_SESSION_FRESH_SECS"
            ]
        );
        assert_eq!(
            suggest(
                "timeout",
                ["connect_timeout_ms", "timeout_ms", "keep_alive"]
            ),
            ["timeout_ms", "connect_timeout_ms"]
        );
    }

    #[test]
    fn the_hint_lists_the_names() {
        assert_eq!(did_you_mean(&[]), "");
        assert_eq!(did_you_mean(&["period".into()]), " (did you mean period?)");
        assert_eq!(
            did_you_mean(&["a".into(), "b".into(), "c".into()]),
            " (did you mean a, b or c?)"
        );
    }
}
