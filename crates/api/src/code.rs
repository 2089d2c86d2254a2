//! Security codes as people type them (`600519`, `600519.SH`, `SH600519`, `sh.600519`,
//! the Eastmoney secid `1.600519`; `00700`, `0700.HK`; `105.AAPL`), read per the
//! endpoint's rule and written in the one form the upstream documents: the cache key
//! and what is forwarded. The rules per endpoint live in the catalogue; what a code's
//! digits say about its exchange (and which suffix contradicts them) lives here.

/// Which codes a parameter takes. A-share, ETF, HK and US codes are not the same
/// thing: each endpoint names its rule in the catalogue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CodeRule {
    /// An A-share code: 6 digits, the exchange as a suffix (`.SH`/`.SZ`/`.BJ`), a
    /// prefix (`SH`, `sh.`) or a secid market (`1.`, `0.`). Stocks, and the funds and
    /// indices that share the 6-digit space: the upstream decides what exists.
    Stock,
    /// An exchange-traded fund: 6 digits with `SH`/`SZ` as suffix, prefix or secid.
    Fund,
    /// What the K-line takes (docs: "A-share 6 digits or with suffix; HK and US
    /// secids also accepted"): a [`Stock`](CodeRule::Stock) code, which on a K-line
    /// is also an index (`399001`, `000300.SH`, `899050`) or an ETF (`510300`); an HK
    /// code (5 digits; `0700.HK`, `HK00700`, the secid `116.00700`); or a US secid
    /// (`105.AAPL`, `106.BABA`, `107.xxx`). No documented endpoint takes index codes
    /// alone: the index ranges are rows of their own in [`exchanges_of`], which every
    /// A-share rule reads.
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

    /// The canonical form of `input`, or `None` when the rule does not accept it
    /// ([`read`](Self::read) says why).
    ///
    /// ```
    /// use mdproxy_api::code::CodeRule;
    /// for typed in ["600519", "600519.SH", "600519.sh", "SH600519", "sh600519", "sh.600519", "1.600519"] {
    ///     assert_eq!(CodeRule::Stock.canonical(typed).as_deref(), Some("600519"), "{typed}");
    /// }
    /// // A suffix the digits do not imply is kept: the Shanghai index is not the Shenzhen bank.
    /// assert_eq!(CodeRule::Stock.canonical("SH000001").as_deref(), Some("000001.SH"));
    /// // Where the digits say the exchange, the suffix is redundant, or contradicts them.
    /// assert_eq!(CodeRule::Kline.canonical("399001.SZ").as_deref(), Some("399001"));
    /// assert_eq!(CodeRule::Kline.canonical("SH510300").as_deref(), Some("510300"));
    /// assert_eq!(CodeRule::Stock.canonical("600519.SZ"), None);
    /// assert_eq!(CodeRule::Kline.canonical("0700.HK").as_deref(), Some("00700"));
    /// assert_eq!(CodeRule::Kline.canonical("105.aapl").as_deref(), Some("105.AAPL"));
    /// assert_eq!(CodeRule::Stock.canonical("00700"), None);
    /// ```
    pub fn canonical(self, input: &str) -> Option<String> {
        self.read(input).ok()
    }

    /// The canonical form of `input`.
    ///
    /// # Errors
    /// [`CodeError::Form`] for what the rule does not read as a code,
    /// [`CodeError::Exchange`] for an exchange the code's digits contradict
    /// (`600519.SZ`: 600519 is listed in Shanghai).
    pub fn read(self, input: &str) -> Result<String, CodeError> {
        match self {
            CodeRule::Stock => a_share(input, Board::Stock),
            CodeRule::Fund => a_share(input, Board::Fund),
            CodeRule::Kline => match a_share(input, Board::Stock) {
                Err(CodeError::Form) => hk(input).or_else(|| us(input)).ok_or(CodeError::Form),
                read => read,
            },
        }
    }

    /// What [`read`](Self::read) accepts as a regular expression (ECMA-262 and Python
    /// alike), for the OpenAPI document: every form, each exchange named only with
    /// the digits it may name, so a contradicting suffix (`600519.SZ`) does not match.
    pub fn pattern(self) -> String {
        match self {
            CodeRule::Stock => a_share_pattern(Board::Stock),
            CodeRule::Fund => a_share_pattern(Board::Fund),
            CodeRule::Kline => format!(
                "({}|([Hh][Kk]\\.?)?[0-9]{{5}}|[0-9]{{4,5}}\\.[Hh][Kk]|116\\.[0-9]{{5}}|10[567]\\.[A-Za-z][A-Za-z0-9_]{{0,9}})",
                a_share_pattern(Board::Stock)
            ),
        }
    }
}

/// The A-share forms of `board` as a regular expression: bare digits, the digits
/// with an exchange as suffix or prefix, the secids.
fn a_share_pattern(board: Board) -> String {
    let exchanges = board.exchanges();
    let mut forms = vec!["[0-9]{6}".to_owned()];
    for &exchange in exchanges {
        let digits = digits_where(board, |listed| {
            listed.is_empty() || listed.contains(&exchange)
        });
        let name: String = exchange
            .chars()
            .map(|c| format!("[{c}{}]", c.to_ascii_lowercase()))
            .collect();
        forms.push(format!("{digits}\\.{name}"));
        forms.push(format!("{name}\\.?{digits}"));
    }
    // Market 1 names Shanghai; market 0 Beijing where the digits are Beijing's, else
    // Shenzhen (a_share's reading).
    let secid = |market: &str| {
        digits_where(board, |listed| {
            let named = match market {
                "1" => "SH",
                _ if listed.contains(&"BJ") => "BJ",
                _ => "SZ",
            };
            exchanges.contains(&named) && (listed.is_empty() || listed.contains(&named))
        })
    };
    forms.push(format!("1\\.{}", secid("1")));
    forms.push(format!("0\\.{}", secid("0")));
    format!("({})", forms.join("|"))
}

/// The 6-digit codes whose exchanges ([`Board::listed`]) pass `ok`, as a regular
/// expression: their 3-digit prefixes (the table's longest), grouped, then three
/// digits.
fn digits_where(board: Board, ok: impl Fn(&'static [&'static str]) -> bool) -> String {
    let mut groups = Vec::new();
    for a in 0..10 {
        let passing: Vec<String> = (0..10)
            .map(|b| {
                (0..10)
                    .filter(|c| ok(board.listed(&format!("{a}{b}{c}000"))))
                    .map(|c: u32| char::from_digit(c, 10).expect("a digit"))
                    .collect()
            })
            .collect();
        if passing.iter().all(|cs| cs.len() == 10) {
            groups.push(format!("{a}[0-9]{{2}}"));
            continue;
        }
        for (b, cs) in passing.iter().enumerate() {
            match cs.len() {
                0 => {}
                10 => groups.push(format!("{a}{b}[0-9]")),
                _ => groups.push(format!("{a}{b}[{cs}]")),
            }
        }
    }
    format!("(?:{})[0-9]{{3}}", groups.join("|"))
}

/// The canonical code of an upstream quote row, as [`CodeRule::Stock`] writes it
/// (`600519`, or `000001.SH` for the Shanghai index). A `code` with an exchange
/// suffix is read as it is; a bare six-digit code takes its exchange from
/// `marketId` (the secid market: 1 Shanghai; 0 Shenzhen, or Beijing where the prefix
/// says so), and without `marketId` from its prefix alone.
///
/// ```
/// use serde_json::json;
/// use mdproxy_api::code::row_code;
/// assert_eq!(row_code(&json!({"code": "000001", "marketId": 1})).as_deref(), Some("000001.SH"));
/// assert_eq!(row_code(&json!({"code": "000001", "marketId": 0})).as_deref(), Some("000001"));
/// assert_eq!(row_code(&json!({"code": "600519"})).as_deref(), Some("600519"));
/// ```
pub fn row_code(item: &serde_json::Value) -> Option<String> {
    let code = item["code"].as_str()?;
    match item["marketId"].as_u64() {
        // A market id the digits contradict is the row's mistake, not a reason to
        // lose the row: its digits then decide.
        Some(market @ (0 | 1)) if is_digits(code, 6) => CodeRule::Stock
            .canonical(&format!("{market}.{code}"))
            .or_else(|| CodeRule::Stock.canonical(code)),
        _ => CodeRule::Stock.canonical(code),
    }
}

/// Why a code is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CodeError {
    /// Not a code the rule reads.
    Form,
    /// The code names an exchange its digits contradict.
    Exchange {
        /// The six digits.
        digits: String,
        /// The exchange the code named.
        named: String,
        /// The exchange the digits belong to.
        listed: &'static str,
    },
}

/// The two readings of a 6-digit code: their exchanges differ.
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

    /// The exchanges `digits` can be listed on, the one its bare digits mean first
    /// (see [`exchanges_of`]); a fund's first digit where the table is silent
    /// (docs/DOMAIN.md §5.2: 5xxxxx Shanghai, 1xxxxx Shenzhen).
    fn listed(self, digits: &str) -> &'static [&'static str] {
        match (exchanges_of(digits), self, digits.as_bytes()[0]) {
            ([], Board::Fund, b'5') => &["SH"],
            ([], Board::Fund, b'1') => &["SZ"],
            (known, _, _) => known,
        }
    }
}

/// What a 6-digit code's prefix says about its exchange (docs/DOMAIN.md §5): the
/// exchanges it can be listed on, the first being the one the bare digits mean.
/// Empty where the prefix does not tell (a bond, a CSI index): any named exchange is
/// kept as named. Only 000xxx is two things: a Shenzhen stock (`000001`, Ping An
/// Bank) or, with `.SH`, a Shanghai index (`000001.SH`, the SSE Composite; `000300.SH`).
pub fn exchanges_of(digits: &str) -> &'static [&'static str] {
    /// Longest prefixes first.
    const PREFIXES: &[(&str, &[&str])] = &[
        ("000", &["SZ", "SH"]),
        // Indices: Shenzhen's, and Beijing's (北证50).
        ("399", &["SZ"]),
        ("899", &["BJ"]),
        // Stocks: SSE main board, STAR Market, B shares.
        ("60", &["SH"]),
        ("68", &["SH"]),
        ("90", &["SH"]),
        // SZSE main board, ChiNext, B shares.
        ("00", &["SZ"]),
        ("30", &["SZ"]),
        ("20", &["SZ"]),
        // BSE, and the ranges it retired in 2025.
        ("92", &["BJ"]),
        ("43", &["BJ"]),
        ("83", &["BJ"]),
        ("87", &["BJ"]),
        ("88", &["BJ"]),
        // Funds: SSE ETFs and LOFs, SZSE ETFs and LOFs.
        ("50", &["SH"]),
        ("51", &["SH"]),
        ("52", &["SH"]),
        ("56", &["SH"]),
        ("58", &["SH"]),
        ("15", &["SZ"]),
        ("16", &["SZ"]),
    ];
    PREFIXES
        .iter()
        .find(|(prefix, _)| digits.starts_with(prefix))
        .map_or(&[], |(_, exchanges)| exchanges)
}

fn is_digits(s: &str, n: usize) -> bool {
    s.len() == n && s.bytes().all(|b| b.is_ascii_digit())
}

/// An A-share code in any of its spellings: digits and the exchange it names, if any.
/// The Eastmoney secid's market 0 covers both Shenzhen and Beijing.
fn a_share(input: &str, board: Board) -> Result<String, CodeError> {
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
                    let sz_or_bj = if board.listed(right).contains(&"BJ") {
                        "BJ"
                    } else {
                        "SZ"
                    };
                    (right, Some(sz_or_bj.to_owned()))
                }
                prefix => (right, Some(upper(prefix))),
            }
        } else {
            return Err(CodeError::Form);
        }
    } else {
        let split = input.len().checked_sub(6).ok_or(CodeError::Form)?;
        let (prefix, digits) = (
            input.get(..split).ok_or(CodeError::Form)?,
            input.get(split..).ok_or(CodeError::Form)?,
        );
        if !is_digits(digits, 6) {
            return Err(CodeError::Form);
        }
        (digits, Some(upper(prefix)))
    };
    let Some(named) = named else {
        return Ok(digits.to_owned());
    };
    if !board.exchanges().contains(&named.as_str()) {
        return Err(CodeError::Form);
    }
    // Bare digits are what the upstream documents; a suffix stays only where it says
    // what the digits do not (`000001.SH`, the index, is not `000001`, the bank).
    match board.listed(digits) {
        [] => Ok(format!("{digits}.{named}")),
        [first, ..] if *first == named => Ok(digits.to_owned()),
        listed if listed.contains(&named.as_str()) => Ok(format!("{digits}.{named}")),
        [first, ..] => Err(CodeError::Exchange {
            digits: digits.to_owned(),
            named,
            listed: first,
        }),
    }
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
            ("0.399001", "399001"),
            ("399001.sz", "399001"),
            ("000001.SH", "000001.SH"),
            ("SH000001", "000001.SH"),
            ("1.000001", "000001.SH"),
            ("000300.SH", "000300.SH"),
            ("0.899050", "899050"),
            ("899050.BJ", "899050"),
            ("SH510300", "510300"),
            ("1.510300", "510300"),
            ("159915.SZ", "159915"),
            // A prefix the table does not know keeps the exchange it was given.
            ("110059.SH", "110059.SH"),
            ("932000.SH", "932000.SH"),
        ] {
            assert_eq!(stock(typed).as_deref(), Some(canonical), "{typed}");
        }
    }

    /// A suffix that contradicts the digits is refused, naming both exchanges; only
    /// 000xxx may be either.
    #[test]
    fn a_suffix_the_digits_contradict_is_refused() {
        for (typed, named, listed) in [
            ("600519.SZ", "SZ", "SH"),
            ("SZ600519", "SZ", "SH"),
            ("0.600519", "SZ", "SH"),
            ("1.399001", "SH", "SZ"),
            ("399001.BJ", "BJ", "SZ"),
            ("920819.SH", "SH", "BJ"),
            ("510300.SZ", "SZ", "SH"),
            ("000001.BJ", "BJ", "SZ"),
        ] {
            match CodeRule::Stock.read(typed) {
                Err(CodeError::Exchange {
                    named: n,
                    listed: l,
                    ..
                }) => assert_eq!((n.as_str(), l), (named, listed), "{typed}"),
                other => panic!("{typed}: {other:?}"),
            }
        }
        assert!(matches!(
            CodeRule::Fund.read("159915.SH"),
            Err(CodeError::Exchange { .. })
        ));
        assert!(matches!(
            CodeRule::Kline.read("600519.SZ"),
            Err(CodeError::Exchange { .. })
        ));
        assert_eq!(CodeRule::Kline.read("600519.HK"), Err(CodeError::Form));
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
        assert_eq!(fund("159915.SH"), None, "a Shenzhen fund");
        assert_eq!(fund("159915.BJ"), None);
        assert_eq!(
            fund("530001.sh").as_deref(),
            Some("530001"),
            "5xxxxx: Shanghai"
        );
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
    /// accepts, over every spelling the tests above use and their near misses, and
    /// over every 3-digit prefix in every form.
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
            "600519.SZ",
            "1.399001",
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
            for prefix in 0..1000 {
                let digits = format!("{prefix:03}123");
                for form in [
                    digits.clone(),
                    format!("{digits}.SH"),
                    format!("{digits}.sz"),
                    format!("{digits}.Bj"),
                    format!("SH{digits}"),
                    format!("sz.{digits}"),
                    format!("BJ{digits}"),
                    format!("1.{digits}"),
                    format!("0.{digits}"),
                ] {
                    assert_eq!(
                        re.is_match(&form),
                        rule.canonical(&form).is_some(),
                        "{rule:?} {form}"
                    );
                }
            }
        }
    }
}
