//! Tool results rendered once per cache entry: the JSON an agent gets from a
//! cached answer depends only on that answer and how the cache served it, so it
//! is built (the envelope parsed, the data cut to fit, the result written in
//! rmcp's words) at the first call after a fill and reused by every call until
//! the entry is replaced. Bounded by weight; what it drops is built again.

use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use moka::sync::Cache;
use rmcp::model::{CallToolResponse, CallToolResult, ContentBlock, ServerResult};
use serde_json::Value;

use crate::cache::entry::CachedBody;
use mdproxy_api::CacheStatus;

/// Bytes of rendered results kept, at most (weighed as three times the body:
/// the body the entry holds, its data as structured JSON and as text).
const MAX_WEIGHT: u64 = 32 * 1024 * 1024;

/// A result as an agent gets it: its JSON, and (built once, when first asked)
/// the tool result rmcp would write for it.
#[derive(Debug)]
pub struct Rendered {
    pub out: Value,
    pub is_error: bool,
    result: OnceLock<Bytes>,
}

impl Rendered {
    pub fn new(out: Value, is_error: bool) -> Arc<Rendered> {
        Arc::new(Rendered {
            out,
            is_error,
            result: OnceLock::new(),
        })
    }

    /// As a tool result: the JSON structured and as text (an error's structured
    /// only, as rmcp's `structured_error` has it).
    pub fn tool_result(&self) -> CallToolResult {
        if self.is_error {
            return CallToolResult::structured_error(self.out.clone());
        }
        let text = self.out.to_string();
        let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
        result.structured_content = Some(self.out.clone());
        result
    }

    /// The tool result as rmcp serialises a `tools/call` result, written once.
    pub fn result_json(&self) -> Bytes {
        self.result
            .get_or_init(|| {
                let result = ServerResult::from(CallToolResponse::from(self.tool_result()));
                Bytes::from(serde_json::to_vec(&result).unwrap_or_default())
            })
            .clone()
    }
}

/// What is kept for one cache key: the entry and the serving it was rendered for.
#[derive(Clone)]
struct Kept {
    entry: Arc<CachedBody>,
    status: CacheStatus,
    rendered: Arc<Rendered>,
}

/// The rendered results by cache key.
pub struct Memo {
    kept: Cache<String, Kept>,
}

impl Default for Memo {
    fn default() -> Memo {
        Memo {
            kept: Cache::builder()
                .max_capacity(MAX_WEIGHT)
                .weigher(|key: &String, kept: &Kept| {
                    let weight = key.len() + 3 * kept.entry.body.len() + 256;
                    u32::try_from(weight).unwrap_or(u32::MAX)
                })
                .build(),
        }
    }
}

impl std::fmt::Debug for Memo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Memo").finish_non_exhaustive()
    }
}

impl Memo {
    /// The result rendered for `entry` served as `status` under `key`, if it is
    /// kept (not for another entry of the key, nor another serving).
    pub fn get(
        &self,
        key: &str,
        entry: &Arc<CachedBody>,
        status: CacheStatus,
    ) -> Option<Arc<Rendered>> {
        self.kept
            .get(key)
            .filter(|k| Arc::ptr_eq(&k.entry, entry) && k.status == status)
            .map(|k| k.rendered)
    }

    /// Keeps `rendered` for `entry` served as `status` under `key`.
    pub fn put(
        &self,
        key: &str,
        entry: &Arc<CachedBody>,
        status: CacheStatus,
        rendered: &Arc<Rendered>,
    ) {
        let kept = Kept {
            entry: Arc::clone(entry),
            status,
            rendered: Arc::clone(rendered),
        };
        self.kept.insert(key.to_owned(), kept);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn entry() -> Arc<CachedBody> {
        Arc::new(crate::cache::store::tests::body(
            "{\"success\":true,\"data\":[1]}",
        ))
    }

    /// A result is reused for its entry served the same way, and only then: a
    /// refilled entry or another serving (stale after hit) is rendered again.
    #[test]
    fn a_result_is_reused_for_its_entry_and_serving_only() {
        let memo = Memo::default();
        let (first, refilled) = (entry(), entry());
        let rendered = Rendered::new(json!({"data": [1], "cache": "hit"}), false);
        memo.put("/k", &first, CacheStatus::Hit, &rendered);
        let again = memo.get("/k", &first, CacheStatus::Hit).expect("kept");
        assert!(Arc::ptr_eq(&again, &rendered));
        assert!(memo.get("/k", &first, CacheStatus::Stale).is_none());
        assert!(memo.get("/k", &refilled, CacheStatus::Hit).is_none());
        assert!(memo.get("/other", &first, CacheStatus::Hit).is_none());
    }

    /// The result written once is rmcp's serialisation of the tool result.
    #[test]
    fn the_written_result_is_rmcps() {
        let rendered = Rendered::new(json!({"data": {"a": "\"q\""}, "cache": "hit"}), false);
        let written = rendered.result_json();
        let rmcp = serde_json::to_vec(&ServerResult::from(CallToolResponse::from(
            rendered.tool_result(),
        )))
        .unwrap();
        assert_eq!(written, Bytes::from(rmcp));
        assert_eq!(
            rendered.result_json().as_ptr(),
            written.as_ptr(),
            "written once"
        );
    }
}
