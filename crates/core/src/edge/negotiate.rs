//! `Accept-Encoding` (RFC 9110 §12.5.3): which representation of a cached answer a
//! client gets, by its q-values. Written here rather than taken from a crate: the
//! `headers` crate's `AcceptEncoding` is disabled in its 0.4 line, and the fork that
//! carries it brings a second copy of that crate; this is one pass over the field,
//! run on every hit that sends it, with no allocation.

use http::{HeaderMap, header};

use crate::cache::encoding::Coding;

/// The server's order among codings the client weighs alike (browsers send
/// `gzip, deflate, br, zstd` at q=1): smallest first at the levels chosen
/// (docs/BENCHMARKS.md "Compression levels": zstd 33.0% of the daily K-line, brotli
/// 34.4%, gzip 35.1%); zstd is also the quickest for the client to decode.
pub const PREFERENCE: [Coding; 3] = [Coding::Zstd, Coding::Brotli, Coding::Gzip];

/// A weight in thousandths, as RFC 9110's `qvalue` has at most three decimals.
type Weight = u16;

/// What a client said of each coding we make, of `identity` and of `*`.
#[derive(Debug, Default)]
struct Said {
    codings: [Option<Weight>; 3],
    identity: Option<Weight>,
    any: Option<Weight>,
}

/// The coding `headers`' `Accept-Encoding` prefers among those we make, or `None`
/// for the identity body.
///
/// A coding is acceptable when it is listed with a non-zero weight, or `*` is;
/// `q=0` refuses. The highest weight wins, and among codings of one weight
/// [`PREFERENCE`] decides. The identity body is the fallback: it wins only when the
/// client lists `identity` itself with more weight than any coding it accepts
/// (`gzip;q=0.5` alone means gzip is wanted, not identity at an implied 1). With no
/// field at all, identity (a client that says nothing may not decode anything).
/// When the client refuses identity (`identity;q=0`, or `*;q=0` without an
/// `identity` entry) and accepts none of ours, it gets identity all the same
/// (RFC 9110 allows a 406; nginx and Caddy send identity). An entry whose `q` is
/// not a valid qvalue is ignored.
pub fn choose(headers: &HeaderMap) -> Option<Coding> {
    let mut said = Said::default();
    let mut any_field = false;
    for value in headers.get_all(header::ACCEPT_ENCODING) {
        any_field = true;
        // A field that is not visible ASCII says nothing we can read.
        let Ok(text) = value.to_str() else { continue };
        for item in text.split(',') {
            read_item(item, &mut said);
        }
    }
    if !any_field {
        return None;
    }
    // Listed: it competes; unlisted, it is only the fallback.
    let identity = said.identity.unwrap_or(0);
    let mut best: Option<(Coding, Weight)> = None;
    for coding in PREFERENCE {
        let weight = said.codings[coding.index()].or(said.any).unwrap_or(0);
        if weight > 0 && best.is_none_or(|(_, w)| weight > w) {
            best = Some((coding, weight));
        }
    }
    best.filter(|&(_, weight)| weight >= identity)
        .map(|(coding, _)| coding)
}

/// Reads one list item (`gzip;q=0.8`) into `said`; the first entry of a name counts.
fn read_item(item: &str, said: &mut Said) {
    let mut parts = item.split(';');
    let name = parts.next().unwrap_or_default().trim();
    if name.is_empty() {
        return;
    }
    let mut weight = Some(1000);
    for param in parts {
        let (key, value) = param.split_once('=').unwrap_or((param, ""));
        if key.trim().eq_ignore_ascii_case("q") {
            weight = qvalue(value.trim());
        }
    }
    let Some(weight) = weight else { return };
    let slot = if name.eq_ignore_ascii_case("gzip") || name.eq_ignore_ascii_case("x-gzip") {
        // RFC 9110 §8.4.1.3: x-gzip is gzip.
        &mut said.codings[Coding::Gzip.index()]
    } else if name.eq_ignore_ascii_case("br") {
        &mut said.codings[Coding::Brotli.index()]
    } else if name.eq_ignore_ascii_case("zstd") {
        &mut said.codings[Coding::Zstd.index()]
    } else if name.eq_ignore_ascii_case("identity") {
        &mut said.identity
    } else if name == "*" {
        &mut said.any
    } else {
        return;
    };
    slot.get_or_insert(weight);
}

/// RFC 9110 §12.4.2: `qvalue = ( "0" [ "." 0*3DIGIT ] ) / ( "1" [ "." 0*3("0") ] )`,
/// in thousandths; `None` for anything else.
fn qvalue(text: &str) -> Option<Weight> {
    let bytes = text.as_bytes();
    let (&first, rest) = bytes.split_first()?;
    let decimals = match rest {
        [] => &[][..],
        [b'.', decimals @ ..] if decimals.len() <= 3 => decimals,
        _ => return None,
    };
    if !decimals.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut thousandths: Weight = 0;
    for i in 0..3 {
        let digit = decimals.get(i).map_or(0, |d| Weight::from(d - b'0'));
        thousandths = thousandths * 10 + digit;
    }
    match first {
        b'0' => Some(thousandths),
        b'1' if thousandths == 0 => Some(1000),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn pick(lines: &[&'static str]) -> Option<&'static str> {
        let mut map = HeaderMap::new();
        for line in lines {
            map.append(header::ACCEPT_ENCODING, HeaderValue::from_static(line));
        }
        choose(&map).map(Coding::as_str)
    }

    #[test]
    fn q_values_choose_the_coding() {
        // What browsers send: all at 1, the server's order decides.
        assert_eq!(pick(&["gzip, deflate, br, zstd"]), Some("zstd"));
        assert_eq!(pick(&["gzip, deflate, br"]), Some("br"));
        assert_eq!(pick(&["gzip"]), Some("gzip"));
        assert_eq!(pick(&["GZIP"]), Some("gzip"));
        assert_eq!(pick(&["x-gzip"]), Some("gzip"));
        // The client's weights win over the server's order.
        assert_eq!(pick(&["br;q=0.5, gzip;q=0.9"]), Some("gzip"));
        assert_eq!(pick(&["br;q=0.8, zstd;q=0.81, gzip"]), Some("gzip"));
        assert_eq!(pick(&["br;q=0.8, zstd;q=0.81"]), Some("zstd"));
        // Over several lines, one list.
        assert_eq!(pick(&["gzip;q=0.5", "zstd"]), Some("zstd"));
        // Spaces and upper-case parameter names.
        assert_eq!(pick(&[" gzip ; Q = 0.4 , br ; q=0.3 "]), Some("gzip"));
    }

    #[test]
    fn q_zero_refuses() {
        assert_eq!(pick(&["gzip;q=0"]), None);
        assert_eq!(pick(&["br;q=0, gzip"]), Some("gzip"));
        assert_eq!(pick(&["br;q=0.000, zstd;q=0, gzip;q=0.001"]), Some("gzip"));
        // `*` accepts what is not listed, and refuses it at q=0.
        assert_eq!(pick(&["*"]), Some("zstd"));
        assert_eq!(pick(&["zstd;q=0, *"]), Some("br"));
        assert_eq!(pick(&["*;q=0"]), None);
        assert_eq!(pick(&["gzip, *;q=0"]), Some("gzip"));
        // The first entry of a name counts.
        assert_eq!(pick(&["gzip;q=0, gzip"]), None);
    }

    #[test]
    fn identity_follows_rfc_9110() {
        // No field: identity. An empty field: identity only.
        assert_eq!(choose(&HeaderMap::new()), None);
        assert_eq!(pick(&[""]), None);
        assert_eq!(pick(&["deflate, compress"]), None);
        // A client that prefers identity gets it; a tie goes to the coding.
        assert_eq!(pick(&["gzip;q=0.5, identity"]), None);
        assert_eq!(pick(&["gzip;q=0.5, identity;q=0.5"]), Some("gzip"));
        // `*` weighs the codings not listed, not identity, the fallback.
        assert_eq!(pick(&["gzip;q=0.2, *;q=0.3"]), Some("zstd"));
        assert_eq!(
            pick(&["gzip;q=0.2, br;q=0.1, zstd;q=0.1, *;q=0.3"]),
            Some("gzip")
        );
        assert_eq!(pick(&["gzip;q=0.2, identity;q=0.1, *;q=0"]), Some("gzip"));
        assert_eq!(pick(&["gzip;q=0.2, identity;q=0.3"]), None);
        assert_eq!(pick(&["gzip;q=0.001"]), Some("gzip"));
        // Identity refused and nothing of ours accepted: identity all the same.
        assert_eq!(pick(&["identity;q=0, deflate"]), None);
    }

    #[test]
    fn invalid_q_values_are_ignored() {
        for bad in [
            "gzip;q=1.5",
            "gzip;q=2",
            "gzip;q=0.0001",
            "gzip;q=.5",
            "gzip;q=x",
            "gzip;q=",
        ] {
            assert_eq!(pick(&[bad]), None, "{bad}");
        }
        assert_eq!(pick(&["br;q=1.5, gzip"]), Some("gzip"));
        assert_eq!(qvalue("1.000"), Some(1000));
        assert_eq!(qvalue("1.001"), None);
        assert_eq!(qvalue("0.75"), Some(750));
        assert_eq!(qvalue("0."), Some(0));
        assert_eq!(qvalue("1"), Some(1000));
    }
}
