//! The errors mdproxy answers with: one enum whose variants are the contract's codes,
//! and the JSON envelope they are written in. Handlers return `Result<_, Error>`; the
//! edge (`edge::response`) turns an `Error` into a response exactly once.

use bytes::Bytes;
use http::StatusCode;

/// An error answered to a client, in the contract's terms.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{reason}")]
    BadRequest { reason: String },
    #[error("{param} is required")]
    MissingParameter { param: String },
    #[error("{reason}")]
    InvalidParameter { param: String, reason: String },
    /// A query parameter the endpoint does not take, with the endpoint's own
    /// parameter nearest to it, if one is near.
    #[error("unknown parameter {param}{}", did_you_mean(*suggestion))]
    UnknownParameter {
        param: String,
        suggestion: Option<&'static str>,
    },
    /// No valid credentials: [`UNAUTHORIZED`](Self::UNAUTHORIZED) on the API,
    /// [`ADMIN_UNAUTHORIZED`](Self::ADMIN_UNAUTHORIZED) on the admin listener; each
    /// names the forms its listener takes.
    #[error("a valid {credential} is required: {forms}")]
    Unauthorized {
        credential: &'static str,
        forms: &'static str,
    },
    /// No endpoint at this path; the documented path nearest to it, if one is near.
    #[error("no endpoint at this path{}", did_you_mean(*nearest))]
    NotFound { nearest: Option<&'static str> },
    #[error("method not allowed; use {allow}")]
    MethodNotAllowed { allow: &'static str },
    #[error("{reason}")]
    NotImplemented { reason: &'static str },
    #[error("the request target is longer than {max_bytes} bytes")]
    UriTooLong { max_bytes: usize },
    #[error("rate limit exceeded; retry after {retry_after_secs} s")]
    RateLimited { retry_after_secs: u64 },
    #[error("{reason}")]
    UpstreamError { reason: String },
    #[error("the upstream did not answer in time")]
    UpstreamTimeout,
    #[error("{reason}")]
    UpstreamThrottled {
        reason: String,
        retry_after_secs: u64,
    },
    #[error("{reason}")]
    StreamUnavailable { reason: String },
    /// More than a limit allows: the upstream budget (`upstream: true`, a wait for
    /// it ran out) or the proxy's own capacity (its connection or stream cap).
    #[error("{reason}")]
    Overloaded { reason: String, upstream: bool },
    #[error("internal error")]
    Internal,
}

/// ` (did you mean X?)`, or nothing.
fn did_you_mean(near: Option<&str>) -> String {
    near.map(|n| format!(" (did you mean {n}?)"))
        .unwrap_or_default()
}

impl Error {
    /// The API's 401: a client key, in any of its three forms.
    pub const UNAUTHORIZED: Error = Error::Unauthorized {
        credential: "API key",
        forms: "Authorization: Bearer <key>, an x-api-key header or an x-api-key query parameter",
    };

    /// The admin listener's 401: the admin token, as a bearer token only.
    pub const ADMIN_UNAUTHORIZED: Error = Error::Unauthorized {
        credential: "admin token",
        forms: "Authorization: Bearer <admin.token>",
    };

    /// A 404 that suggests nothing (the admin listener's, an API path no endpoint
    /// is near).
    pub const NOT_FOUND: Error = Error::NotFound { nearest: None };

    /// The API's methods (`Allow: GET, HEAD`).
    pub const GET_OR_HEAD: Error = Error::MethodNotAllowed { allow: "GET, HEAD" };

    /// Shorthand for an invalid parameter.
    pub fn invalid(param: &str, reason: impl Into<String>) -> Error {
        Error::InvalidParameter {
            param: param.to_owned(),
            reason: reason.into(),
        }
    }

    /// One error of each kind, in declaration order (the OpenAPI document lists
    /// their statuses; a test keeps [`CODES`](Self::CODES) equal to their codes). The
    /// match has no wildcard, so a new variant stops the build here until it is added.
    pub fn one_of_each() -> Vec<Error> {
        let none = String::new;
        let all = vec![
            Error::BadRequest { reason: none() },
            Error::MissingParameter { param: none() },
            Error::InvalidParameter {
                param: none(),
                reason: none(),
            },
            Error::UnknownParameter {
                param: none(),
                suggestion: None,
            },
            Error::UNAUTHORIZED,
            Error::NOT_FOUND,
            Error::GET_OR_HEAD,
            Error::NotImplemented { reason: "" },
            Error::UriTooLong { max_bytes: 0 },
            Error::RateLimited {
                retry_after_secs: 1,
            },
            Error::UpstreamError { reason: none() },
            Error::UpstreamTimeout,
            Error::UpstreamThrottled {
                reason: none(),
                retry_after_secs: 1,
            },
            Error::StreamUnavailable { reason: none() },
            Error::Overloaded {
                reason: none(),
                upstream: true,
            },
            Error::Internal,
        ];
        for error in &all {
            match error {
                Error::BadRequest { .. }
                | Error::MissingParameter { .. }
                | Error::InvalidParameter { .. }
                | Error::UnknownParameter { .. }
                | Error::Unauthorized { .. }
                | Error::NotFound { .. }
                | Error::MethodNotAllowed { .. }
                | Error::NotImplemented { .. }
                | Error::UriTooLong { .. }
                | Error::RateLimited { .. }
                | Error::UpstreamError { .. }
                | Error::UpstreamTimeout
                | Error::UpstreamThrottled { .. }
                | Error::StreamUnavailable { .. }
                | Error::Overloaded { .. }
                | Error::Internal => {}
            }
        }
        all
    }

    /// Every error code of the contract, in declaration order.
    pub const CODES: [&'static str; 16] = [
        "bad_request",
        "missing_parameter",
        "invalid_parameter",
        "unknown_parameter",
        "unauthorized",
        "not_found",
        "method_not_allowed",
        "not_implemented",
        "uri_too_long",
        "rate_limited",
        "upstream_error",
        "upstream_timeout",
        "upstream_throttled",
        "stream_unavailable",
        "overloaded",
        "internal_error",
    ];

    /// The contract's error code.
    pub fn code(&self) -> &'static str {
        match self {
            Error::BadRequest { .. } => "bad_request",
            Error::MissingParameter { .. } => "missing_parameter",
            Error::InvalidParameter { .. } => "invalid_parameter",
            Error::UnknownParameter { .. } => "unknown_parameter",
            Error::Unauthorized { .. } => "unauthorized",
            Error::NotFound { .. } => "not_found",
            Error::MethodNotAllowed { .. } => "method_not_allowed",
            Error::NotImplemented { .. } => "not_implemented",
            Error::UriTooLong { .. } => "uri_too_long",
            Error::RateLimited { .. } => "rate_limited",
            Error::UpstreamError { .. } => "upstream_error",
            Error::UpstreamTimeout => "upstream_timeout",
            Error::UpstreamThrottled { .. } => "upstream_throttled",
            Error::StreamUnavailable { .. } => "stream_unavailable",
            Error::Overloaded { .. } => "overloaded",
            Error::Internal => "internal_error",
        }
    }

    /// The HTTP status of this error.
    pub fn status(&self) -> StatusCode {
        match self {
            Error::BadRequest { .. }
            | Error::MissingParameter { .. }
            | Error::InvalidParameter { .. }
            | Error::UnknownParameter { .. } => StatusCode::BAD_REQUEST,
            Error::Unauthorized { .. } => StatusCode::UNAUTHORIZED,
            Error::NotFound { .. } => StatusCode::NOT_FOUND,
            Error::MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
            Error::NotImplemented { .. } => StatusCode::NOT_IMPLEMENTED,
            Error::UriTooLong { .. } => StatusCode::URI_TOO_LONG,
            Error::RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
            Error::UpstreamError { .. } => StatusCode::BAD_GATEWAY,
            Error::StreamUnavailable { .. }
            | Error::Overloaded { .. }
            | Error::UpstreamThrottled { .. } => StatusCode::SERVICE_UNAVAILABLE,
            Error::UpstreamTimeout => StatusCode::GATEWAY_TIMEOUT,
            Error::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// When to try again (`Retry-After`), for the errors that say.
    pub fn retry_after_secs(&self) -> Option<u64> {
        match self {
            Error::RateLimited { retry_after_secs }
            | Error::UpstreamThrottled {
                retry_after_secs, ..
            } => Some(*retry_after_secs),
            _ => None,
        }
    }

    /// The parameter this error is about, if any.
    pub fn param(&self) -> Option<&str> {
        match self {
            Error::MissingParameter { param }
            | Error::InvalidParameter { param, .. }
            | Error::UnknownParameter { param, .. } => Some(param),
            _ => None,
        }
    }

    /// Whether mdproxy makes this error on the upstream's behalf (it is unreachable,
    /// failing, slow, or its budget or breaker holds it back): the errors that the
    /// upstream-compatible error mode answers as the upstream reports its own. The
    /// proxy's own limits (its stream and connection caps, client rate limits) are
    /// not: they keep their statuses in both modes.
    pub fn is_on_upstreams_behalf(&self) -> bool {
        matches!(
            self,
            Error::UpstreamError { .. }
                | Error::UpstreamTimeout
                | Error::UpstreamThrottled { .. }
                | Error::Overloaded { upstream: true, .. }
        )
    }

    /// The envelope as the real upstream reports its own failures (HTTP 200): the
    /// upstream's `message` (`socket hang up`, `Failed to fetch kline`), mdproxy's
    /// detail under `error` as in [`envelope`](Self::envelope).
    pub fn upstream_envelope(&self, message: &str) -> Bytes {
        let mut error = serde_json::Map::new();
        error.insert("code".into(), self.code().into());
        error.insert("message".into(), self.to_string().into());
        let body = serde_json::json!({
            "success": false,
            "data": null,
            "message": message,
            "error": error,
        });
        Bytes::from(serde_json::to_vec(&body).expect("a JSON value always serialises"))
    }

    /// The real upstream's failure envelope, with mdproxy's detail beside it:
    /// `{"success":false,"data":null,"message":..,"error":{"code":..,"message":..,"param":..}}`.
    /// Clients of the real API read `message`; `error` names the code and parameter.
    pub fn envelope(&self) -> Bytes {
        let message = self.to_string();
        let mut error = serde_json::Map::new();
        error.insert("code".into(), self.code().into());
        error.insert("message".into(), message.clone().into());
        if let Some(param) = self.param() {
            error.insert("param".into(), param.into());
        }
        let body = serde_json::json!({
            "success": false,
            "data": null,
            "message": message,
            "error": error,
        });
        Bytes::from(serde_json::to_vec(&body).expect("a JSON value always serialises"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelope_names_code_and_param() {
        let e = Error::invalid("period", "period must be one of day, week, month");
        let v: serde_json::Value = serde_json::from_slice(&e.envelope()).unwrap();
        assert_eq!(v["success"], false);
        assert!(v["data"].is_null() && v.as_object().unwrap().contains_key("data"));
        assert_eq!(v["message"], "period must be one of day, week, month");
        assert_eq!(v["error"]["message"], v["message"]);
        assert_eq!(v["error"]["code"], "invalid_parameter");
        assert_eq!(v["error"]["param"], "period");
        assert_eq!(e.status(), StatusCode::BAD_REQUEST);
    }

    #[test]
    fn the_code_list_is_every_error_in_order() {
        let codes: Vec<&str> = Error::one_of_each().iter().map(Error::code).collect();
        assert_eq!(codes, Error::CODES);
    }

    #[test]
    fn statuses_follow_the_contract() {
        assert_eq!(Error::UNAUTHORIZED.status(), 401);
        assert_eq!(Error::ADMIN_UNAUTHORIZED.status(), 401);
        assert_eq!(Error::NOT_FOUND.status(), 404);
        assert_eq!(Error::MethodNotAllowed { allow: "GET" }.status(), 405);
        assert_eq!(
            Error::RateLimited {
                retry_after_secs: 1
            }
            .status(),
            429
        );
        assert_eq!(
            Error::UpstreamError {
                reason: String::new()
            }
            .status(),
            502
        );
        assert_eq!(Error::UpstreamTimeout.status(), 504);
        assert_eq!(
            Error::StreamUnavailable {
                reason: String::new()
            }
            .status(),
            503
        );
    }
}
