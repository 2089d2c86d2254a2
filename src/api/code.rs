//! Security codes as people type them (`600519`, `600519.SH`, `SH600519`, `sh.600519`,
//! the Eastmoney secid `1.600519`; `00700`, `0700.HK`; `105.AAPL`), read per the
//! endpoint's rule and written in the one form the upstream documents: the cache key
//! and what is forwarded. The rules per endpoint live in the catalogue.

use std::fmt::Write as _;

/// Which codes a parameter takes. A-share, ETF, HK and US codes are not the same
/// thing: each endpoint names its rule in the catalogue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CodeRule {
    /// An A-share stock (or index) code: 6 digits, the exchange as a suffix
    /// (`.SH`/`.SZ`/`.BJ`), a prefix (`SH`, `sh.`) or a secid market (`1.`, `0.`).
    Stock,
    /// An exchange-traded fund: 6 digits with `SH`/`SZ` as suffix, prefix or secid.
    Fund,
    /// What the K-line takes (docs: "A-share 6 digits or with suffix; HK and US
    /// secids also accepted"): a [`Stock`](CodeRule::Stock) code, an HK code (5
    /// digits; `0700.HK`, `HK00700`, the secid `116.00700`), or a US secid
    /// (`105.AAPL`, `106.BABA`, `107.xxx`).
    Kline,
}

impl CodeRule {
    /// What the rule accepts, for error messages.
    pub fn forms(self) -> &'static str {
        match self {
            CodeRule::Stock => {
                "6 digits, optionally with the exchange as .SH, .SZ or .BJ, as a prefix (SH600519) or as an Eastmoney secid (1.600519)"
            }
            CodeRule::Fund => {
                "6 digits, optionally with the exchange as .SH or .SZ, as a prefix (SZ159915) or as an Eastmoney secid (0.159915)"
            }
            CodeRule::Kline => {
                "an A-share code (600519, 600519.SH, SH600519, 1.600519), an HK code (00700, 0700.HK, HK00700, 116.00700) or a US secid (105.AAPL)"
            }
        }
    }

    /// The canonical form of `input`, or `None` when the rule does not accept it.
    ///
    /// ```
    /// use mdproxy::api::code::CodeRule;
    /// for typed in ["600519", "600519.SH", "600519.sh", "SH600519", "sh600519", "sh.600519", "1.600519"] {
    ///     assert_eq!(CodeRule::Stock.canonical(typed).as_deref(), Some("600519"), "{typed}");
    /// }
    /// // A suffix the digits do not imply is kept: the Shanghai index is not the Shenzhen bank.
    /// assert_eq!(CodeRule::Stock.canonical("SH000001").as_deref(), Some("000001.SH"));
    /// assert_eq!(CodeRule::Kline.canonical("0700.HK").as_deref(), Some("00700"));
    /// assert_eq!(CodeRule::Kline.canonical("105.aapl").as_deref(), Some("105.AAPL"));
    /// assert_eq!(CodeRule::Stock.canonical("00700"), None);
    /// ```
    pub fn canonical(self, input: &str) -> Option<String> {
        match self {
            CodeRule::Stock => a_share(input, Board::Stock),
            CodeRule::Fund => a_share(input, Board::Fund),
            CodeRule::Kline => a_share(input, Board::Stock)
                .or_else(|| hk(input))
                .or_else(|| us(input)),
        }
    }

    /// The same acceptance as [`canonical`](Self::canonical) as a regular expression
    /// (ECMA-262 and Python alike), for the OpenAPI document.
    pub fn pattern(self) -> String {
        let stock = "(([Ss][HhZz]|[Bb][Jj])\\.?[0-9]{6}|[0-9]{6}(\\.([Ss][HhZz]|[Bb][Jj]))?|[01]\\.[0-9]{6})";
        let fund = "([Ss][HhZz]\\.?[0-9]{6}|[0-9]{6}(\\.[Ss][HhZz])?|[01]\\.[0-9]{6})";
        match self {
            CodeRule::Stock => stock.to_owned(),
            CodeRule::Fund => fund.to_owned(),
            CodeRule::Kline => {
                let mut p = String::from("(");
                let _ = write!(
                    p,
                    "{stock}|([Hh][Kk]\\.?)?[0-9]{{5}}|[0-9]{{4,5}}\\.[Hh][Kk]|116\\.[0-9]{{5}}|10[567]\\.[A-Za-z][A-Za-z0-9_]{{0,9}}"
                );
                p.push(')');
                p
            }
        }
    }
}

/// The canonical code of an upstream quote row, as [`CodeRule::Stock`] writes it
/// (`600519`, or `000001.SH` for the Shanghai index). A `code` with an exchange
/// suffix is read as it is; a bare six-digit code takes its exchange from
/// `marketId` (the secid market: 1 Shanghai; 0 Shenzhen, or Beijing where the prefix
/// says so), and without `marketId` from its prefix alone.
///
/// ```
/// use serde_json::json;
/// use mdproxy::api::code::row_code;
/// assert_eq!(row_code(&json!({"code": "000001", "marketId": 1})).as_deref(), Some("000001.SH"));
/// assert_eq!(row_code(&json!({"code": "000001", "marketId": 0})).as_deref(), Some("000001"));
/// assert_eq!(row_code(&json!({"code": "600519"})).as_deref(), Some("600519"));
/// ```
pub fn row_code(item: &serde_json::Value) -> Option<String> {
    let code = item["code"].as_str()?;
    match item["marketId"].as_u64() {
        Some(market @ (0 | 1)) if is_digits(code, 6) => {
            CodeRule::Stock.canonical(&format!("{market}.{code}"))
        }
        _ => CodeRule::Stock.canonical(code),
    }
}

/// The two kinds of 6-digit A-share listing: their exchanges and implied prefixes differ.
#[derive(Clone, Copy)]
enum Board {
    Stock,
    Fund,
}

impl Board {
    fn exchanges(self) -> &'static [&'static str] {
        match self {
            Board::Stock => &["SH", "SZ", "BJ"],
            Board::Fund => &["SH", "SZ"],
        }
    }

    fn implied(self, digits: &str) -> Option<&'static str> {
        match self {
            Board::Stock => implied_exchange(digits),
            // docs/DOMAIN.md §5.2: 5xxxxx are Shanghai funds, 1xxxxx Shenzhen ones.
            Board::Fund => match digits.as_bytes()[0] {
                b'5' => Some("SH"),
                b'1' => Some("SZ"),
                _ => None,
            },
        }
    }
}

/// The exchange a stock code's prefix implies (docs/DOMAIN.md §5.1): 60/68/90 SH;
/// 00/30/20 SZ; 92 and the retired 43/83/87/88 BJ. `None` where the prefix does not
/// tell (an index range such as 399xxx).
pub fn implied_exchange(digits: &str) -> Option<&'static str> {
    match digits.get(..2)? {
        "60" | "68" | "90" => Some("SH"),
        "00" | "30" | "20" => Some("SZ"),
        "92" | "43" | "83" | "87" | "88" => Some("BJ"),
        _ => None,
    }
}

fn is_digits(s: &str, n: usize) -> bool {
    s.len() == n && s.bytes().all(|b| b.is_ascii_digit())
}

/// An A-share code in any of its spellings: digits and the exchange it names, if any.
/// The Eastmoney secid's market 0 covers both Shenzhen and Beijing.
fn a_share(input: &str, board: Board) -> Option<String> {
    let upper = |s: &str| s.to_ascii_uppercase();
    let (digits, named): (&str, Option<String>) = if is_digits(input, 6) {
        (input, None)
    } else if let Some((left, right)) = input.split_once('.') {
        if is_digits(left, 6) {
            (left, Some(upper(right)))
        } else if is_digits(right, 6) {
            match left {
                "1" => (right, Some("SH".to_owned())),
                "0" => {
                    let sz_or_bj = match board.implied(right) {
                        Some("BJ") => "BJ",
                        _ => "SZ",
                    };
                    (right, Some(sz_or_bj.to_owned()))
                }
                prefix => (right, Some(upper(prefix))),
            }
        } else {
            return None;
        }
    } else {
        let split = input.len().checked_sub(6)?;
        let (prefix, digits) = (input.get(..split)?, input.get(split..)?);
        if !is_digits(digits, 6) {
            return None;
        }
        (digits, Some(upper(prefix)))
    };
    if let Some(named) = &named
        && !board.exchanges().contains(&named.as_str())
    {
        return None;
    }
    // Bare digits are what the upstream documents; a suffix stays only where it says
    // what the digits do not (`000001.SH`, the index, is not `000001`, the bank).
    Some(match named {
        Some(exchange) if Some(exchange.as_str()) != board.implied(digits) => {
            format!("{digits}.{exchange}")
        }
        _ => digits.to_owned(),
    })
}

/// An HK code: 5 digits (`00700`), `0700.HK`/`00700.hk`, `HK00700`/`hk.00700`, or
/// the secid `116.00700`; written as 5 digits.
fn hk(input: &str) -> Option<String> {
    let digits = if is_digits(input, 5) {
        input
    } else if let Some((left, right)) = input.split_once('.') {
        if right.eq_ignore_ascii_case("HK") && (is_digits(left, 4) || is_digits(left, 5)) {
            left
        } else if (left.eq_ignore_ascii_case("HK") || left == "116") && is_digits(right, 5) {
            right
        } else {
            return None;
        }
    } else {
        let digits = input.get(2..)?;
        if !(input.get(..2)?.eq_ignore_ascii_case("HK") && is_digits(digits, 5)) {
            return None;
        }
        digits
    };
    Some(format!("{digits:0>5}"))
}

/// A US secid: market 105 (NASDAQ), 106 (NYSE) or 107 (AMEX), a dot, a ticker of a
/// letter and up to nine letters, digits or `_`; written with the ticker upper-case.
fn us(input: &str) -> Option<String> {
    let (market, ticker) = input.split_once('.')?;
    let ok = matches!(market, "105" | "106" | "107")
        && (1..=10).contains(&ticker.len())
        && ticker.as_bytes()[0].is_ascii_alphabetic()
        && ticker
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_');
    ok.then(|| format!("{market}.{}", ticker.to_ascii_uppercase()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stock(s: &str) -> Option<String> {
        CodeRule::Stock.canonical(s)
    }

    #[test]
    fn every_spelling_of_one_stock_is_one_code() {
        for typed in [
            "600519",
            "600519.SH",
            "600519.sh",
            "600519.Sh",
            "SH600519",
            "sh600519",
            "SH.600519",
            "sh.600519",
            "1.600519",
        ] {
            assert_eq!(stock(typed).as_deref(), Some("600519"), "{typed}");
        }
        for (typed, canonical) in [
            ("000001.sz", "000001"),
            ("sz000001", "000001"),
            ("0.000001", "000001"),
            ("920819.BJ", "920819"),
            ("bj920819", "920819"),
            ("0.920819", "920819"),
            ("900901", "900901"),
            ("399001", "399001"),
            ("0.399001", "399001.SZ"),
            ("000001.SH", "000001.SH"),
            ("SH000001", "000001.SH"),
            ("1.000001", "000001.SH"),
            ("600519.SZ", "600519.SZ"),
        ] {
            assert_eq!(stock(typed).as_deref(), Some(canonical), "{typed}");
        }
    }

    #[test]
    fn what_is_not_a_stock_code_is_refused() {
        for bad in [
            "",
            "60051",
            "6005190",
            "600519.HK",
            "HK600519",
            "2.600519",
            "SH",
            "SH60051a",
            "600519.",
            ".600519",
            "00700",
            "105.AAPL",
            "600519.SH.SH",
            "ＳＨ600519",
        ] {
            assert_eq!(stock(bad), None, "{bad}");
        }
    }

    #[test]
    fn funds_take_shanghai_and_shenzhen_only() {
        let fund = |s| CodeRule::Fund.canonical(s);
        assert_eq!(fund("510300.sh").as_deref(), Some("510300"));
        assert_eq!(fund("SZ159915").as_deref(), Some("159915"));
        assert_eq!(fund("0.159915").as_deref(), Some("159915"));
        assert_eq!(fund("159915.SH").as_deref(), Some("159915.SH"));
        assert_eq!(fund("159915.BJ"), None);
    }

    #[test]
    fn klines_take_hk_codes_and_us_secids() {
        let kline = |s| CodeRule::Kline.canonical(s);
        for typed in [
            "00700",
            "0700.HK",
            "00700.hk",
            "HK00700",
            "hk.00700",
            "116.00700",
        ] {
            assert_eq!(kline(typed).as_deref(), Some("00700"), "{typed}");
        }
        assert_eq!(kline("SH600519").as_deref(), Some("600519"));
        assert_eq!(kline("105.aapl").as_deref(), Some("105.AAPL"));
        assert_eq!(kline("106.BRK_B").as_deref(), Some("106.BRK_B"));
        for bad in [
            "0700",
            "700.HK",
            "HK0700",
            "117.00700",
            "105.",
            "105.1A",
            "108.AAPL",
        ] {
            assert_eq!(kline(bad), None, "{bad}");
        }
    }

    /// The pattern the OpenAPI document states accepts exactly what the parser
    /// accepts, over every spelling the tests above use and their near misses.
    #[test]
    fn patterns_accept_what_the_parser_accepts() {
        let inputs = [
            "600519",
            "600519.SH",
            "600519.sh",
            "SH600519",
            "sh.600519",
            "1.600519",
            "0.000001",
            "920819.BJ",
            "bj920819",
            "0.399001",
            "510300.sh",
            "SZ159915",
            "159915.BJ",
            "00700",
            "0700.HK",
            "00700.hk",
            "HK00700",
            "hk.00700",
            "116.00700",
            "105.aapl",
            "106.BRK_B",
            "",
            "60051",
            "6005190",
            "600519.HK",
            "HK600519",
            "2.600519",
            "SH",
            "600519.",
            ".600519",
            "0700",
            "700.HK",
            "HK0700",
            "117.00700",
            "105.",
            "105.1A",
            "108.AAPL",
            "600519.SH.SH",
        ];
        for rule in [CodeRule::Stock, CodeRule::Fund, CodeRule::Kline] {
            let re = regex::Regex::new(&format!("^{}$", rule.pattern())).unwrap();
            for input in inputs {
                assert_eq!(
                    re.is_match(input),
                    rule.canonical(input).is_some(),
                    "{rule:?} {input}"
                );
            }
        }
    }
}
