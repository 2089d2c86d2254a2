//! Tool results rendered once per cache entry: the JSON an agent gets from a
//! cached answer depends only on that answer and how the cache served it, so it
//! is built (the envelope parsed, the data cut to fit, the result written in
//! rmcp's words) at the first call after a fill, once however many calls ask at
//! that moment, and reused by every call until the entry is replaced. Bounded by
//! weight; what it drops is built again.

use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use moka::future::Cache;
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

/// What is kept for one cache key and serving: the entry it was rendered for.
#[derive(Clone)]
struct Kept {
    entry: Arc<CachedBody>,
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
    /// The result for `entry` served as `status` under `key`: the one kept if it
    /// was rendered for that entry, else `render`'s, kept. Calls that ask for
    /// the same key and serving at once wait for one rendering.
    pub async fn rendered(
        &self,
        key: &str,
        entry: &Arc<CachedBody>,
        status: CacheStatus,
        render: impl FnOnce() -> Arc<Rendered>,
    ) -> Arc<Rendered> {
        // Taken by whichever way renders: this call's init, or its own below.
        let render = std::sync::Mutex::new(Some(render));
        let take = || render.lock().ok().and_then(|mut r| r.take()).map(|r| r());
        let init = async {
            Kept {
                entry: Arc::clone(entry),
                rendered: take().expect("rendered once"),
            }
        };
        let kept = self
            .kept
            .entry(format!("{}{key}", status.as_str()))
            .or_insert_with_if(init, |kept| !Arc::ptr_eq(&kept.entry, entry))
            .await
            .into_value();
        // A call that waited on another's rendering got that call's entry, which
        // may be another fill of the key: it renders its own then.
        if Arc::ptr_eq(&kept.entry, entry) {
            kept.rendered
        } else {
            take().unwrap_or(kept.rendered)
        }
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
    /// refilled entry or another serving (stale after hit) is rendered again; calls
    /// at once for one entry render it once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_result_is_reused_for_its_entry_and_serving_only() {
        let memo = Arc::new(Memo::default());
        let (first, refilled) = (entry(), entry());
        let renders = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let render = |cache: &'static str| {
            let renders = Arc::clone(&renders);
            move || {
                renders.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                // A long result takes a while: the other calls arrive meanwhile.
                std::thread::sleep(std::time::Duration::from_millis(50));
                Rendered::new(json!({"data": [1], "cache": cache}), false)
            }
        };
        let calls = (0..8).map(|_| {
            let (memo, first, render) = (Arc::clone(&memo), Arc::clone(&first), render("hit"));
            tokio::spawn(async move { memo.rendered("/k", &first, CacheStatus::Hit, render).await })
        });
        let results = futures_util::future::join_all(calls).await;
        assert_eq!(
            renders.load(std::sync::atomic::Ordering::SeqCst),
            1,
            "rendered once"
        );
        let one = results[0].as_ref().unwrap();
        assert!(
            results
                .iter()
                .all(|r| Arc::ptr_eq(r.as_ref().unwrap(), one))
        );

        let stale = memo
            .rendered("/k", &first, CacheStatus::Stale, render("stale"))
            .await;
        assert_eq!(stale.out["cache"], "stale");
        let again = memo
            .rendered("/k", &first, CacheStatus::Hit, render("hit"))
            .await;
        assert!(Arc::ptr_eq(&again, one), "kept beside the stale one");
        let fresh = memo
            .rendered("/k", &refilled, CacheStatus::Hit, render("hit"))
            .await;
        assert!(
            !Arc::ptr_eq(&fresh, one),
            "a refilled entry is rendered again"
        );
        assert_eq!(renders.load(std::sync::atomic::Ordering::SeqCst), 3);

        // Two fills of one key asked at once: a call that waited on the other's
        // rendering does not take it for its own entry.
        let (older, newer) = (entry(), entry());
        let first = {
            let (memo, older, render) = (Arc::clone(&memo), Arc::clone(&older), render("older"));
            tokio::spawn(async move { memo.rendered("/j", &older, CacheStatus::Hit, render).await })
        };
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        let second = memo
            .rendered("/j", &newer, CacheStatus::Hit, render("newer"))
            .await;
        assert_eq!(first.await.unwrap().out["cache"], "older");
        assert_eq!(second.out["cache"], "newer", "its own entry's result");
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
