//! Which requests' validations the API crate's memo keeps: those of targets the
//! cache answered from what it held, so that a flood of targets asked once (each a
//! miss) does not spend a slot, and a copy of its validation, per request.

use http::Request;
use mdproxy_api::params::Valid;
use mdproxy_api::router::API_PREFIX;

use crate::cache::readthrough::Served;

/// Whether a request's validation goes into the memo once the cache answers it
/// from what it holds: a target asked once (a miss) would only take a slot.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Remember {
    Yes,
    No,
}

impl Remember {
    /// Puts `valid` in the memo for `request`'s target if asked to and `served`
    /// came from what the cache held.
    pub(crate) fn after<B>(self, request: &Request<B>, valid: &Valid, served: Option<Served>) {
        if self == Remember::No || served.is_none_or(Served::filled) {
            return;
        }
        if let Some(api_path) = request.uri().path().strip_prefix(API_PREFIX) {
            mdproxy_api::memo::put(api_path, request.uri().query(), valid);
        }
    }
}
