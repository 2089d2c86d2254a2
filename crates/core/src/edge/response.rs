//! HTTP answers: a cached answer with the contract's headers (`X-Cache`,
//! `Cache-Status`, `Age`, `ETag`, `Cache-Control`), in the encoding the client
//! prefers (gzip, brotli, zstd; chosen by `negotiate`), 304 when
//! `If-None-Match` names the representation; an upstream answer relayed as it is; the
//! OpenAPI document; and every [`Error`] as the JSON envelope, in exactly one place.

use std::sync::{LazyLock, OnceLock};

use bytes::Bytes;
use headers::{ETag, HeaderMapExt, IfNoneMatch};
use http::{HeaderMap, HeaderName, HeaderValue, Method, Response, StatusCode, header};

use crate::cache::encoding::Coding;
use crate::cache::entry::CachedBody;
use crate::cache::freshness;
use crate::cache::readthrough::{Answer, Served};
use crate::edge::body::{self, Body};
use crate::edge::head::Head;
use crate::stats::CacheStatus;
use crate::telemetry::context::X_REQUEST_ID;
use mdproxy_api::error::Error;

/// `X-Cache` (a `HeaderName` constant: a `&str` name is parsed on every insert).
pub const X_CACHE: HeaderName = HeaderName::from_static("x-cache");
/// `Cache-Status` (RFC 9211).
pub const CACHE_STATUS: HeaderName = HeaderName::from_static("cache-status");

/// A cached answer's headers, in the order of [`HEADS`]: the five values that
/// change from hit to hit come first and are written in place by position.
const DYNAMIC: usize = 5;

/// Written over by [`answer`] (the five first) and by the handler (the request ID).
const PLACEHOLDER: HeaderValue = HeaderValue::from_static("-");

/// The header maps a cached answer starts from, identity then one per coding (by
/// [`head_index`]): every name it
/// carries is in place, so an answer clones one and writes five values by position,
/// where inserting each header would hash its name and probe the table (callgrind:
/// the inserts took about 1,250 instructions a hit, the clone and the writes take
/// about 700, of some 17,000 in all). The request ID's slot follows the five, and
/// [`write_request_id`] writes it by position too.
static HEADS: LazyLock<[HeaderMap; 4]> = LazyLock::new(|| {
    [
        head(None),
        head(Some(Coding::ALL[0])),
        head(Some(Coding::ALL[1])),
        head(Some(Coding::ALL[2])),
    ]
});

/// The position in [`HEADS`] of the head for `coding`.
fn head_index(coding: Option<Coding>) -> usize {
    coding.map_or(0, |c| c.index() + 1)
}

fn head(coding: Option<Coding>) -> HeaderMap {
    let mut map = HeaderMap::new();
    // The order `answer` writes them in.
    let dynamic: [HeaderName; DYNAMIC] = [
        X_CACHE,
        CACHE_STATUS,
        header::AGE,
        header::ETAG,
        header::CACHE_CONTROL,
    ];
    for name in dynamic {
        map.insert(name, PLACEHOLDER);
    }
    // At index DYNAMIC: before `Vary`, whose extra value (CORS' `Origin`) would
    // otherwise move it.
    map.insert(X_REQUEST_ID, PLACEHOLDER);
    map.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if let Some(coding) = coding {
        map.insert(
            header::CONTENT_ENCODING,
            HeaderValue::from_static(coding.as_str()),
        );
    }
    map.insert(header::VARY, HeaderValue::from_static("Accept-Encoding"));
    map
}

/// Sets a response's `X-Request-Id` to `id`: in its slot when the response started
/// from one of [`HEADS`] (a walk of six entries and a name check, where an insert
/// hashes the name and probes), else by insert.
pub fn write_request_id(headers: &mut HeaderMap, id: HeaderValue) {
    if let Some((name, slot)) = headers.iter_mut().nth(DYNAMIC)
        && name == X_REQUEST_ID
    {
        *slot = id;
        return;
    }
    headers.insert(X_REQUEST_ID, id);
}

/// The `X-Cache` label as a static header value (no allocation on the hit path).
fn x_cache(status: CacheStatus) -> HeaderValue {
    HeaderValue::from_static(status.as_str())
}

/// Header values that carry a number, built once for each small number and then
/// cloned as static values: the numbers of a hit (`Age`, `max-age`, the `ttl` of
/// `Cache-Status`) change once a second, so a hot key would otherwise format and
/// allocate the same three values on every request. The table lives in `.bss`;
/// each value is leaked once when first used (at most [`NUMBERED`] per table, a few
/// hundred KiB in all). Larger numbers are formatted each time.
struct Numbered {
    prefix: &'static str,
    values: [OnceLock<HeaderValue>; NUMBERED],
}

/// How many numbers each table keeps: a bit over an hour of seconds, which covers
/// the live classes; longer lifetimes (a closed market's) take the slow path.
const NUMBERED: usize = 4096;

impl Numbered {
    const fn new(prefix: &'static str) -> Numbered {
        Numbered {
            prefix,
            values: [const { OnceLock::new() }; NUMBERED],
        }
    }

    /// `prefix` followed by `n` in decimal.
    fn get(&self, n: u64) -> HeaderValue {
        let format = || {
            let mut digits = itoa::Buffer::new();
            let mut text = String::with_capacity(self.prefix.len() + 20);
            text.push_str(self.prefix);
            text.push_str(digits.format(n));
            text
        };
        match usize::try_from(n).ok().and_then(|i| self.values.get(i)) {
            Some(cell) => cell
                .get_or_init(|| HeaderValue::from_static(format().leak()))
                .clone(),
            None => HeaderValue::try_from(format()).expect("ASCII digits and text"),
        }
    }
}

static AGE: Numbered = Numbered::new("");
static MAX_AGE: Numbered = Numbered::new("max-age=");
static HIT_TTL: Numbered = Numbered::new("mdproxy; hit; ttl=");

/// `Cache-Status`; `ttl` is the seconds of freshness left (negative when stale).
fn cache_status(served: Served, ttl: i64) -> HeaderValue {
    let detail = match served {
        Served::Hit => match u64::try_from(ttl) {
            Ok(ttl) => return HIT_TTL.get(ttl),
            Err(_) => "",
        },
        Served::Negative => "negative",
        Served::Revalidating => "stale-while-revalidate",
        Served::Shared => "shared",
        Served::Disk => "disk",
        Served::StaleIfError => "stale-if-error",
        Served::StaleHeldBack(why) => why.detail(),
        Served::Stored => return HeaderValue::from_static("mdproxy; fwd=miss; stored"),
        Served::Relayed => return HeaderValue::from_static("mdproxy; fwd=miss"),
        Served::RefetchedStale => return HeaderValue::from_static("mdproxy; fwd=stale; stored"),
        Served::Collapsed => return HeaderValue::from_static("mdproxy; fwd=miss; collapsed"),
    };
    const HEAD: &str = "mdproxy; hit; ttl=";
    const DETAIL: &str = "; detail=";
    let mut digits = itoa::Buffer::new();
    let digits = digits.format(ttl);
    let mut value =
        bytes::BytesMut::with_capacity(HEAD.len() + digits.len() + DETAIL.len() + detail.len());
    value.extend_from_slice(HEAD.as_bytes());
    value.extend_from_slice(digits.as_bytes());
    if !detail.is_empty() {
        value.extend_from_slice(DETAIL.as_bytes());
        value.extend_from_slice(detail.as_bytes());
    }
    HeaderValue::from_maybe_shared(value.freeze()).expect("ASCII digits and text")
}

/// Whether `If-None-Match` names `etag` (RFC 9110 §13.1.2: `*`, or any listed tag
/// under weak comparison), evaluated by the `headers` crate.
fn not_modified(request: &HeaderMap, etag: &HeaderValue) -> bool {
    let Some(if_none_match) = request.typed_get::<IfNoneMatch>() else {
        return false;
    };
    etag.to_str()
        .ok()
        .and_then(|e| e.parse::<ETag>().ok())
        .is_some_and(|etag| !if_none_match.precondition_passes(&etag))
}

/// The coding `request` prefers for `entry`'s body (`negotiate`), made or not;
/// `None` for the identity body. A list header is read in full only when the client
/// sent it, and only for a body that has compressed representations.
pub fn preferred(request: &Head<'_>, entry: &CachedBody) -> Option<Coding> {
    (request.accept_encoding && entry.is_compressible())
        .then(|| crate::edge::negotiate::choose(request.map))
        .flatten()
}

/// A cached answer with the contract's headers, in `coding` when that
/// representation is made (else the identity body), or 304 when `If-None-Match`
/// names the representation sent.
pub fn answer(request: &Head<'_>, answer: &Answer, coding: Option<Coding>) -> Response<Body> {
    let Answer {
        entry,
        served,
        lifetimes,
        now,
    } = answer;
    let copy = coding.and_then(|c| entry.copy(c).map(|copy| (c, copy)));
    let coding = copy.as_ref().map(|(c, _)| *c);
    let (bytes, etag) = match copy {
        Some((_, copy)) => copy,
        None => (entry.body.clone(), entry.etag.clone()),
    };
    let not_modified =
        entry.status == 200 && request.if_none_match && not_modified(request.map, &etag);
    let mut response = if not_modified {
        empty(StatusCode::NOT_MODIFIED)
    } else {
        let mut r = Response::new(body::full(bytes));
        *r.status_mut() = StatusCode::from_u16(entry.status).unwrap_or(StatusCode::OK);
        r
    };
    // Whole seconds of freshness left, negative once stale; `max-age` is the same
    // number while fresh (both truncate), else 0.
    let ttl = lifetimes.ttl_secs(*now);
    let dynamic = [
        x_cache(served.x_cache()),
        cache_status(*served, ttl),
        AGE.get(freshness::age_secs(*now, entry.fetched_at)),
        etag,
        max_age(u64::try_from(ttl).unwrap_or(0)),
    ];
    // A 304 says nothing of an encoding (it has no body), only its validator.
    let head = &HEADS[if not_modified { 0 } else { head_index(coding) }];
    let headers = response.headers_mut();
    *headers = head.clone();
    for (slot, value) in headers.values_mut().zip(dynamic) {
        *slot = value;
    }
    response
}

/// A response with `status` and no body (a 304).
fn empty(status: StatusCode) -> Response<Body> {
    let mut response = Response::new(body::empty());
    *response.status_mut() = status;
    response
}

/// `max-age=N`.
fn max_age(secs: u64) -> HeaderValue {
    MAX_AGE.get(secs)
}

/// An upstream answer that is not cached but belongs to the client (a 4xx, a
/// `"success": false` body), relayed byte for byte.
pub fn relay(status: u16, body: Bytes) -> Response<Body> {
    let mut response = Response::new(body::full(body));
    *response.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY);
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(X_CACHE, x_cache(CacheStatus::Miss));
    headers.insert(CACHE_STATUS, HeaderValue::from_static("mdproxy; fwd=miss"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// The OpenAPI document as compact JSON, and its strong validator: built once.
static DOCUMENT: LazyLock<(Bytes, HeaderValue)> = LazyLock::new(|| {
    let body = serde_json::to_vec(&mdproxy_api::openapi::document())
        .expect("a JSON value always serialises");
    let hash = twox_hash::XxHash3_64::oneshot(&body);
    let etag = HeaderValue::from_str(&format!("\"{hash:016x}\"")).expect("hex digits");
    (Bytes::from(body), etag)
});

/// How long a client may use the document without asking again: it changes only
/// with the binary, and the ETag makes asking cheap.
const DOCUMENT_MAX_AGE: &str = "public, max-age=300";

/// The OpenAPI document (GET and HEAD; no token needed), or 304 when
/// `If-None-Match` names it.
///
/// # Errors
/// `MethodNotAllowed` for any other method.
pub fn document(method: &Method, request: &HeaderMap) -> Result<Response<Body>, Error> {
    if !matches!(*method, Method::GET | Method::HEAD) {
        return Err(Error::GET_OR_HEAD);
    }
    let (body, etag) = &*DOCUMENT;
    let mut response = if not_modified(request, etag) {
        empty(StatusCode::NOT_MODIFIED)
    } else {
        Response::new(body::full(body.clone()))
    };
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(header::ETAG, etag.clone());
    headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static(DOCUMENT_MAX_AGE),
    );
    Ok(response)
}

/// Turns a value into a whole response (axum's `IntoResponse`, for our one body).
pub trait IntoResponse {
    /// The response.
    fn to_response(&self) -> Response<Body>;
}

impl IntoResponse for Error {
    /// The JSON envelope with `WWW-Authenticate`, `Allow` or `Retry-After` where the
    /// status calls for it, never cached.
    fn to_response(&self) -> Response<Body> {
        let mut response = Response::new(body::full(self.envelope()));
        *response.status_mut() = self.status();
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        match self {
            Error::Unauthorized { .. } => {
                headers.insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Bearer realm=\"mdproxy\""),
                );
            }
            Error::MethodNotAllowed { allow } => {
                headers.insert(header::ALLOW, HeaderValue::from_static(allow));
            }
            _ => {
                if let Some(secs) = self.retry_after_secs() {
                    headers.insert(header::RETRY_AFTER, HeaderValue::from(secs));
                }
            }
        }
        response
    }
}

/// An error mdproxy makes on the upstream's behalf, in the upstream-compatible
/// error mode (`server.error_mode = "upstream"`): HTTP 200 with `success: false`
/// and the upstream's own `message` for the endpoint, never cached.
pub fn upstream_style(error: &Error, message: &str) -> Response<Body> {
    let mut response = Response::new(body::full(error.upstream_envelope(message)));
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn if_none_match_follows_rfc_9110() {
        let ours = HeaderValue::from_static("\"abc\"");
        let m = |v: &'static str| {
            let mut h = HeaderMap::new();
            h.insert(header::IF_NONE_MATCH, HeaderValue::from_static(v));
            not_modified(&h, &ours)
        };
        assert!(m("\"abc\""));
        assert!(m("W/\"abc\""));
        assert!(m("\"x\", \"abc\""));
        assert!(m("*"));
        assert!(!m("\"abd\""));
        assert!(!m("abc"));
        assert!(!not_modified(&HeaderMap::new(), &ours));
    }

    #[test]
    fn cache_status_follows_rfc_9211() {
        assert_eq!(cache_status(Served::Hit, 12), "mdproxy; hit; ttl=12");
        assert_eq!(
            cache_status(Served::Revalidating, -3),
            "mdproxy; hit; ttl=-3; detail=stale-while-revalidate"
        );
        assert_eq!(
            cache_status(Served::Collapsed, 5),
            "mdproxy; fwd=miss; collapsed"
        );
        assert_eq!(Served::StaleIfError.x_cache(), CacheStatus::Stale);
        assert_eq!(Served::Negative.x_cache(), CacheStatus::Hit);
    }

    #[test]
    fn max_age_writes_seconds() {
        assert_eq!(max_age(0), "max-age=0");
        assert_eq!(max_age(3), "max-age=3");
        assert_eq!(max_age(3600), "max-age=3600");
        // Past the table: formatted each time, the same text.
        assert_eq!(max_age(86_400), "max-age=86400");
        assert_eq!(AGE.get(12), "12");
        assert_eq!(AGE.get(12), "12");
        assert_eq!(
            cache_status(Served::Hit, 100_000),
            "mdproxy; hit; ttl=100000"
        );
    }

    /// An answer `after_ms` after its entry was fetched; fresh for 20 s, stale 10 s more.
    fn answer_at(served: Served, request: &HeaderMap, after_ms: i64) -> Response<Body> {
        use crate::cache::freshness::{Lifetimes, Rule};
        let fetched_at = chrono::Utc::now();
        let now = fetched_at + chrono::Duration::milliseconds(after_ms);
        let lifetimes = Lifetimes {
            fresh_until: fetched_at + chrono::Duration::seconds(20),
            stale_until: fetched_at + chrono::Duration::seconds(30),
            error_until: fetched_at + chrono::Duration::seconds(40),
        };
        let rule = Rule {
            endpoint_id: 0,
            class: mdproxy_api::catalog::FreshnessClass::Live,
            until_open: false,
            negative: false,
            settles: None,
            venue: mdproxy_market::Venue::China,
        };
        let body = Bytes::from(vec![b' '; 4096]);
        let entry = CachedBody::new(body, 200, fetched_at, rule, lifetimes, 0);
        // As a fill leaves it once clients asked for every coding.
        entry.encode_all();
        let answer_ = Answer {
            entry: std::sync::Arc::new(entry),
            served,
            lifetimes,
            now,
        };
        let head = Head::read(request);
        let coding = preferred(&head, &answer_.entry);
        answer(&head, &answer_, coding)
    }

    /// The prebuilt heads leave no placeholder behind but the request ID's (which
    /// the handler always writes), in either encoding.
    #[test]
    fn a_cached_answer_carries_every_contract_header_written() {
        let accepting = |coding: &'static str| {
            let mut map = HeaderMap::new();
            map.insert(header::ACCEPT_ENCODING, HeaderValue::from_static(coding));
            (map, Some(coding))
        };
        for (request, encoded) in [
            (HeaderMap::new(), None),
            accepting("gzip"),
            accepting("br"),
            accepting("zstd"),
        ] {
            let r = answer_at(Served::Hit, &request, 7_500);
            let h = r.headers();
            assert_eq!(h[X_CACHE], "HIT");
            assert_eq!(h[CACHE_STATUS], "mdproxy; hit; ttl=12");
            assert_eq!(h[header::AGE], "7");
            assert_eq!(h[header::CACHE_CONTROL], "max-age=12");
            assert_eq!(h[header::CONTENT_TYPE], "application/json");
            assert_eq!(h[header::VARY], "Accept-Encoding");
            assert!(h[header::ETAG].to_str().unwrap().starts_with('"'));
            assert_eq!(
                h.get(header::CONTENT_ENCODING).map(|v| v.to_str().unwrap()),
                encoded,
            );
            // Each representation has its own validator.
            let tag = h[header::ETAG].to_str().unwrap();
            let suffix = match encoded {
                Some("gzip") => "-gz\"",
                Some("br") => "-br\"",
                Some("zstd") => "-zst\"",
                _ => "",
            };
            let hash = &tag[1..17];
            assert!(hash.bytes().all(|b| b.is_ascii_hexdigit()), "{tag}");
            assert_eq!(&tag[17..], if suffix.is_empty() { "\"" } else { suffix });
            for (name, value) in h {
                assert!(
                    value != PLACEHOLDER || name == X_REQUEST_ID,
                    "{name} is left as a placeholder"
                );
            }
            // A 304 of a compressed representation says nothing of an encoding.
            let mut again = request.clone();
            again.insert(header::IF_NONE_MATCH, h[header::ETAG].clone());
            let r = answer_at(Served::Hit, &again, 7_500);
            assert_eq!(r.status(), StatusCode::NOT_MODIFIED);
            assert!(r.headers().get(header::CONTENT_ENCODING).is_none());
            assert_eq!(r.headers()[header::AGE], "7");
        }
        // Stale: the negative ttl, and no freshness left to promise.
        let r = answer_at(Served::Revalidating, &HeaderMap::new(), 25_500);
        assert_eq!(r.headers()[X_CACHE], "STALE");
        assert_eq!(
            r.headers()[CACHE_STATUS],
            "mdproxy; hit; ttl=-5; detail=stale-while-revalidate"
        );
        assert_eq!(r.headers()[header::AGE], "25");
        assert_eq!(r.headers()[header::CACHE_CONTROL], "max-age=0");
    }

    /// The request ID lands in its slot, CORS headers or not, and by insert on a
    /// response that did not start from a prebuilt head; either way it is the only
    /// value of its header.
    #[test]
    fn the_request_id_is_written_once_whatever_the_response() {
        let cors = crate::edge::cors::Cors::new(&["*".to_owned()]);
        let origin = HeaderValue::from_static("https://dash.example");
        let mut error = Response::new(body::empty());
        error
            .headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
        for (mut r, with_cors, from_head) in [
            (
                answer_at(Served::Hit, &HeaderMap::new(), 1_000),
                false,
                true,
            ),
            (answer_at(Served::Hit, &HeaderMap::new(), 1_000), true, true),
            (error, true, false),
        ] {
            if with_cors {
                cors.apply(Some(&origin), r.headers_mut());
            }
            let count = r.headers().len();
            let grows = usize::from(!r.headers().contains_key(X_REQUEST_ID));
            write_request_id(r.headers_mut(), HeaderValue::from_static("id-1"));
            let h = r.headers();
            assert_eq!(h.get_all(X_REQUEST_ID).iter().collect::<Vec<_>>(), ["id-1"]);
            assert_eq!(h.len(), count + grows);
            assert!(h.values().all(|v| v != PLACEHOLDER), "{h:?}");
            if from_head {
                // Written in place: the slot after the five dynamic values.
                let (name, value) = h.iter().nth(DYNAMIC).unwrap();
                assert_eq!((name, value.as_bytes()), (&X_REQUEST_ID, &b"id-1"[..]));
            }
        }
    }

    #[test]
    fn errors_carry_the_contract_headers() {
        let r = Error::UNAUTHORIZED.to_response();
        assert!(
            r.headers()[header::WWW_AUTHENTICATE]
                .to_str()
                .unwrap()
                .starts_with("Bearer")
        );
        let r = Error::GET_OR_HEAD.to_response();
        assert_eq!(r.headers()[header::ALLOW], "GET, HEAD");
        let r = Error::RateLimited {
            retry_after_secs: 3,
        }
        .to_response();
        assert_eq!(r.headers()[header::RETRY_AFTER], "3");
        assert_eq!(r.headers()[header::CACHE_CONTROL], "no-store");
    }
}
