//! The upstream's documented list of endpoints (docs/upstream-endpoints.json), read
//! once: what the answers' shapes and the tools' Chinese terms are read off.

use std::sync::LazyLock;

use serde_json::Value;

/// The list as the docs' generator wrote it.
const DOCUMENTED: &str = include_str!("../../../docs/upstream-endpoints.json");

/// Every documented endpoint, as its entry in the list.
pub(crate) fn endpoints() -> &'static [Value] {
    static LIST: LazyLock<Vec<Value>> =
        LazyLock::new(|| serde_json::from_str(DOCUMENTED).expect("the documented list is JSON"));
    &LIST
}

/// The Chinese words the docs give for parameter `name` of the endpoint at `path`
/// (a catalogue template), if any.
pub(crate) fn param_zh(path: &str, name: &str) -> Option<&'static str> {
    endpoints().iter().find(|e| e["path"] == path)?["params"]
        .as_array()?
        .iter()
        .find(|p| p["name"] == name)?["description_zh"]
        .as_str()
        .filter(|zh| !zh.is_empty() && *zh != "undefined")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_parameter_has_the_docs_chinese_words() {
        assert_eq!(
            param_zh("/fund/detail/{code}", "code"),
            Some("基金代码，如 159915")
        );
        assert_eq!(param_zh("/fund/detail/{code}", "nope"), None);
        assert_eq!(param_zh("/nope", "code"), None);
    }
}
