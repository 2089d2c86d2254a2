//! The status page: `/status` as one self-contained HTML document (inline style and
//! script, no external asset, works offline) that renders the `/status.json` value
//! embedded in it at serve time, then refreshes itself from `/status.json`.

use http::{HeaderValue, Response, header};

use crate::edge::body::{self, Body};

/// The page: `status.html`, with [`DATA_MARK`] where the status goes.
const TEMPLATE: &str = include_str!("status.html");

/// Where the page's template takes the status JSON (inside a
/// `<script type="application/json">`, which the browser never runs).
const DATA_MARK: &str = "{{STATUS_JSON}}";

/// What the page may load: nothing but itself and `/status.json` (`connect-src`).
const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'unsafe-inline'; \
     style-src 'unsafe-inline'; img-src data:; connect-src 'self'; base-uri 'none'; \
     form-action 'none'; frame-ancestors 'none'";

/// The page for `status` (the value `/status.json` serves).
pub fn page(status: &serde_json::Value) -> Response<Body> {
    let html = TEMPLATE.replacen(DATA_MARK, &embeddable(status), 1);
    let mut r = Response::new(body::full(html));
    let headers = r.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    r
}

/// `value` as JSON that cannot end the `<script>` element it sits in, whatever its
/// strings hold (an upstream error's detail is not ours): `<`, `>` and `&` become
/// JSON escapes, which `JSON.parse` reads back as they were.
fn embeddable(value: &serde_json::Value) -> String {
    let json = serde_json::to_string(value).expect("a JSON value always serialises");
    let mut out = String::with_capacity(json.len() + 16);
    for c in json.chars() {
        match c {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_json_cannot_close_its_script() {
        let value = serde_json::json!({ "detail": "</script><script>alert(1)</script> & more" });
        let text = embeddable(&value);
        assert!(!text.contains('<') && !text.contains('>') && !text.contains('&'));
        let back: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(back, value);
    }

    #[test]
    fn the_template_has_one_place_for_the_data_and_loads_nothing() {
        assert_eq!(TEMPLATE.matches(DATA_MARK).count(), 1);
        for external in ["src=\"http", "href=\"http", "@import", "url(http", "//cdn"] {
            assert!(!TEMPLATE.contains(external), "{external}");
        }
    }
}
