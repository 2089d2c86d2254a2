//! The upstream as a fill's last step: what to ask it for a key, and how its answer
//! is kept (a "not found" briefly, and never in place of an answer that found what
//! was asked while that answer may still stand in for a failure).

use bytes::Bytes;

use crate::cache::entry::CachedBody;
use crate::cache::freshness::Rule;
use crate::cache::tier::Fill;
use crate::upstream::client::FetchError;
use crate::upstream::{Upstream, UpstreamRequest};
use mdproxy_api::catalog::{Endpoint, catalog};
use mdproxy_api::params::Valid;

/// The upstream as a fill's last step: what to ask it, and how to keep its answer.
pub struct Origin {
    upstream: Upstream,
    /// Path and canonical query relative to `/api/v1`.
    target: String,
    passthrough: bool,
    endpoint: &'static Endpoint,
    rule: Rule,
}

impl Origin {
    /// What to ask the upstream for `valid`, and under which rule to keep it.
    pub fn of(upstream: &Upstream, valid: &Valid) -> Origin {
        Origin {
            upstream: upstream.clone(),
            target: valid.upstream_target().to_owned(),
            passthrough: valid.endpoint == catalog().passthrough(),
            endpoint: valid.endpoint,
            rule: Rule::of(valid),
        }
    }

    /// Asks the upstream and wraps its answer with its lifetimes under the fill's
    /// policy (a 404 becomes a short negative entry). When a held answer `found`
    /// what it asked (this node's or the fleet's, one that
    /// [may stand in](CachedBody::may_stand_in)), a 404 is the upstream's failure
    /// instead, as a `success: false` is: it neither replaces that answer here nor
    /// reaches the other tiers, the answer stands in, and the key backs off.
    pub async fn fetch(&self, fill: &Fill<'_>, found: bool) -> Result<CachedBody, FetchError> {
        let request = UpstreamRequest {
            target: &self.target,
            priority: fill.priority,
            passthrough: self.passthrough,
            endpoint: self.endpoint,
        };
        let (body, status, rule) = match self.upstream.request(request).await {
            Ok(fetched) => (fetched.body, 200, self.rule),
            Err(FetchError::Answer { status: 404, body }) if found => {
                return Err(not_found_over_found(body));
            }
            // Negative caching: an unknown code stays unknown for a while.
            Err(FetchError::Answer { status: 404, body }) => (
                body,
                404,
                Rule {
                    negative: true,
                    ..self.rule
                },
            ),
            Err(e) => return Err(e),
        };
        let fetched_at = fill.clock.now();
        let lifetimes = fill.policy.lifetimes(rule, fetched_at);
        Ok(CachedBody::new(
            body,
            status,
            fetched_at,
            rule,
            lifetimes,
            fill.policy.generation(),
        ))
    }
}

/// What another tier found for a fill (the fleet's store, where a node that found
/// no 200 anywhere shared the 404), under the same rule as the upstream's answer:
/// when this node's held answer `found` what it asked, a "not found" is a failure.
///
/// # Errors
/// `fetched`'s, and the upstream's failure in place of a 404 when `found`.
pub fn over_held(
    fetched: Result<CachedBody, FetchError>,
    found: bool,
) -> Result<CachedBody, FetchError> {
    match fetched {
        Ok(entry) if found && entry.status == 404 => Err(not_found_over_found(entry.body)),
        other => other,
    }
}

/// A 404 after a 200, as a failure: the real upstream documents its 404 for
/// unknown paths only, so after a 200 it is a fault of its own (a deploy, a source
/// gone for a while), as its `success: false` is.
fn not_found_over_found(body: Bytes) -> FetchError {
    FetchError::Reported { status: 404, body }
}
