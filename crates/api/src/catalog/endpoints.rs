//! The rows of the catalogue: every documented GET endpoint (docs/upstream-endpoints.json)
//! with its parameters as documented (types, enums, defaults, required flags), its
//! freshness class and why, when its answers become final, and its upstream timeout.
//! The rows live in one file per group (`news`, `stock`, `fund`, `market`); the
//! macro indicators are made here from [`MACRO_INDICATORS`].

mod fund;
mod market;
mod news;
mod stock;

use super::{
    ClassRule, Endpoint, FreshnessClass, Group, MAX_ID, MAX_PAGE, MAX_PAGE_SIZE, Param, ParamKind,
    Patience, Settles, Successor, VenueRule, param_name,
};
use crate::code::CodeRule;

use FreshnessClass::{
    Calendar, Daily, Filings, Immutable, Intraday, Live, Minute, News, Periodic, Reference,
};

/// The stream endpoint's path.
pub const STREAM_PATH: &str = "/stock/indicator/realtime/sse";

/// The upstream's message when its own request to a source breaks, documented for the
/// fund endpoints; the message of every endpoint whose docs name no other.
pub const TRANSPORT_FAILURE: &str = "socket hang up";

/// Documented endpoints mdproxy does not serve, with why: each is refused with
/// `501 not_implemented` and this reason, whatever the method.
pub const REFUSED: &[(&str, &str)] = &[(
    "/stock/report/download",
    "POST /stock/report/download is not forwarded: it makes the upstream download a file into a directory of its own (a side effect with nothing to cache); call the upstream directly for it",
)];

/// The realtime list's Hong Kong markets.
const HK_MARKETS: &[&str] = &["hk", "hk_main", "hk_gem"];

/// The minute periods of `/stock/kline`.
const MINUTE_PERIODS: &[&str] = &["1m", "5m", "15m", "30m", "60m"];

const STOCK_PERIOD: Param = Param::new(
    "period",
    ParamKind::Choice(&["1m", "5m", "15m", "30m", "60m", "day", "week", "month"]),
)
.default("day");
const FUND_PERIOD: Param =
    Param::new("period", ParamKind::Choice(&["day", "week", "month"])).default("day");
/// The adjustment of a K-line: forward (`pre`), backward or none. The upstream
/// documents backward adjustment as `after`; docs/API-SPEC.md calls it `post`. Both
/// are accepted, and `post` is keyed and forwarded as `after`.
const FQT: Param = Param::new("fqt", ParamKind::Choice(&["pre", "after", "post", "none"]))
    .synonyms(&[("post", "after")]);
const FROM: Param = Param::new("from", ParamKind::Date);
const TO: Param = Param::new("to", ParamKind::Date);
/// A report period's end, documented as `YYYY-MM-DD` (shareholders).
const END_DATE: Param = Param::new("endDate", ParamKind::Date);
/// A date bound whose format the docs do not state (corporate actions, governance and
/// regulatory events): text, for the upstream to read.
const fn date_text(name: &'static str) -> Param {
    Param::new(name, ParamKind::Text { max_chars: 32 })
}
const FLOW_TYPE: Param = Param::new("type", ParamKind::Choice(&["1", "2", "3"]));
/// What the retired flows' `type` became in their successors.
const FLOW_DIMENSION: (&str, &str, &[(&str, &str)]) = (
    "type",
    "dimension",
    &[("1", "region"), ("2", "industry"), ("3", "concept")],
);
const DIMENSION: Param = Param::new(
    "dimension",
    ParamKind::Choice(&["region", "industry", "concept"]),
)
.default("industry");
/// A page number the docs give no range for.
const fn page(name: &'static str) -> Param {
    Param::new(
        name,
        ParamKind::Int {
            min: 0,
            max: MAX_PAGE,
        },
    )
}
/// A count the docs give no range for (page size, limit, years).
const fn count(name: &'static str) -> Param {
    Param::new(
        name,
        ParamKind::Int {
            min: 1,
            max: MAX_PAGE_SIZE,
        },
    )
}
/// An identifier or Unix time the docs give no range for.
const fn id(name: &'static str) -> Param {
    Param::new(
        name,
        ParamKind::Int {
            min: 0,
            max: MAX_ID,
        },
    )
}
/// Free text the docs give no form for.
const fn text(name: &'static str, max_chars: usize) -> Param {
    Param::new(name, ParamKind::Text { max_chars })
}
const PAGE: Param = page("page");
const PAGE_SIZE: Param = count("pageSize");
/// A year: a string in the docs, read by the upstream.
const YEAR: Param = text("year", 16);
const KEYWORD: Param = text("keyword", 64);
const FILTER: Param = text("filter", 512);
const STOCK_NAME: Param = text("stockName", 64);
const TIME_RANGE: Param = Param::new(
    "timeRange",
    ParamKind::Choice(&["3m", "6m", "1y", "3y", "5y"]),
);
/// The financial series' report type: values undocumented (the samples say `annual`).
const REPORT_TYPE: Param = text("reportType", 32);
const FINANCIAL_SERIES: &[Param] = &[REPORT_TYPE, count("years")];

/// The code of a stock, in a path or query.
const STOCK_CODE: Param = Param::new("code", ParamKind::Code(CodeRule::Stock));
const KLINE_CODE: Param = Param::new("code", ParamKind::Code(CodeRule::Kline));
const FUND_CODE: Param = Param::new("code", ParamKind::Code(CodeRule::Fund));
const THEME_ID: Param = Param::new("themeId", ParamKind::Ident);

/// K-line ranges settle once they end before today; forward adjustment never settles.
const RANGE_ENDED: Settles = Settles {
    param: "to",
    months: 0,
    why: "a range that ended before today in its market (not forward-adjusted: neither `fqt=pre` nor `fqt` absent)",
};

/// Holdings at a period's end are final once every periodic report of the period is
/// out (the annual one, the last due, within four months).
const PERIOD_REPORTED: Settles = Settles {
    param: "endDate",
    months: 4,
    why: "4 months after `endDate` (the last periodic report of a period is due by then)",
};

/// A row of the table below; expanded into an [`Endpoint`].
struct Def {
    path: &'static str,
    class: FreshnessClass,
    query: &'static [Param],
    summary: &'static str,
    why: &'static str,
    one_of: &'static [&'static str],
    class_rules: &'static [ClassRule],
    settles: Option<Settles>,
    successor: Option<Successor>,
    venue: Option<VenueRule>,
    patience: Patience,
    failure_message: &'static str,
}

const fn def(
    path: &'static str,
    class: FreshnessClass,
    query: &'static [Param],
    summary: &'static str,
    why: &'static str,
) -> Def {
    Def {
        path,
        class,
        query,
        summary,
        why,
        one_of: &[],
        class_rules: &[],
        settles: None,
        successor: None,
        venue: None,
        patience: Patience::Standard,
        failure_message: TRANSPORT_FAILURE,
    }
}

impl Def {
    const fn rules(self, class_rules: &'static [ClassRule]) -> Def {
        Def {
            class_rules,
            ..self
        }
    }
    const fn settles(self, settles: Settles) -> Def {
        Def {
            settles: Some(settles),
            ..self
        }
    }
    /// Some answers follow another market's sessions.
    const fn venue(self, venue: VenueRule) -> Def {
        Def {
            venue: Some(venue),
            ..self
        }
    }
    /// A retired endpoint, answered as `path` with `type` renamed.
    const fn answered_as(self, path: &'static str) -> Def {
        Def {
            successor: Some(Successor {
                path,
                renamed: FLOW_DIMENSION,
            }),
            ..self
        }
    }
    const fn one_of(self, one_of: &'static [&'static str]) -> Def {
        Def { one_of, ..self }
    }
    /// The failure message the docs show for this endpoint.
    const fn fails_with(self, failure_message: &'static str) -> Def {
        Def {
            failure_message,
            ..self
        }
    }
    const fn long(self) -> Def {
        Def {
            patience: Patience::Long,
            ..self
        }
    }
}

/// The eleven macro indicators: (path slug, what it measures). Each has a paged
/// table `/macro/<slug>` and a chart series `/macro/<slug>/series`.
pub const MACRO_INDICATORS: [(&str, &str); 11] = [
    ("pmi", "PMI (purchasing managers index)"),
    ("cpi", "CPI (consumer prices)"),
    ("ppi", "PPI (producer prices)"),
    ("gdp", "GDP"),
    ("currency-supply", "Money supply (M0, M1, M2)"),
    ("lpr", "LPR (loan prime rate)"),
    ("new-loans", "New loans"),
    ("fixed-asset-investment", "Fixed-asset investment (urban)"),
    ("total-retail", "Total retail sales of consumer goods"),
    ("customs-trade", "Customs import and export change"),
    ("gold-currency", "Foreign-exchange and gold reserves"),
];

const QUOTE: &str = "a quote: moves with every trade";
const BOARD: &str = "follows the session's trading";
const REPORTS: &str = "changes when a report is published";
const DAILY: &str = "computed once a day";
const LIST: &str = "changes with listings, a few times a day at most";

/// Every endpoint in the docs' order: news and stock, then macro, then fund and market.
pub(super) fn all() -> Vec<Endpoint> {
    let mut endpoints = Vec::with_capacity(96);
    for d in news::NEWS.iter().chain(stock::STOCK) {
        endpoints.push(expand(d.path.to_owned(), d, d.summary.to_owned()));
    }
    const MACRO_TABLE: Def = def(
        "",
        FreshnessClass::Macro,
        &[PAGE, PAGE_SIZE],
        "",
        "a release about once a month (pages shift with each release: never final)",
    );
    const MACRO_SERIES: Def = def(
        "",
        FreshnessClass::Macro,
        &[],
        "",
        "a release about once a month (the whole series, latest included: never final)",
    );
    for (slug, name) in MACRO_INDICATORS {
        endpoints.push(expand(
            format!("/macro/{slug}"),
            &MACRO_TABLE,
            format!("{name}: paged table"),
        ));
        endpoints.push(expand(
            format!("/macro/{slug}/series"),
            &MACRO_SERIES,
            format!("{name}: chart series"),
        ));
    }
    for d in fund::FUND.iter().chain(market::MARKET) {
        endpoints.push(expand(d.path.to_owned(), d, d.summary.to_owned()));
    }
    endpoints
}

fn expand(path: String, d: &Def, summary: String) -> Endpoint {
    let group = match path.split('/').nth(1) {
        Some("news") => Group::News,
        Some("stock") => Group::Stock,
        Some("macro") => Group::Macro,
        Some("fund") => Group::Fund,
        Some("market") => Group::Market,
        other => panic!("catalogue path {path} has an unknown group {other:?}"),
    };
    // {code} is a stock code under /stock and an ETF code under /fund; {themeId} is
    // a theme.
    let path_params = path
        .split('/')
        .filter_map(param_name)
        .map(|name| match (group, name) {
            (Group::Fund, "code") => FUND_CODE.required(),
            (_, "code") => STOCK_CODE.required(),
            (_, "themeId") => THEME_ID.required(),
            (_, other) => panic!("catalogue path {path} has an unknown parameter {other}"),
        })
        .collect();
    let until_open_when = d
        .query
        .iter()
        .any(|p| p.name == "fqt")
        .then_some(("fqt", "pre"));
    let streaming = path == STREAM_PATH;
    Endpoint {
        id: 0,
        path,
        group,
        path_params,
        query: d.query,
        one_of: d.one_of,
        class: d.class,
        class_rules: d.class_rules,
        until_open_when,
        settles: d.settles,
        successor: d.successor,
        venue: d.venue,
        patience: d.patience,
        streaming,
        summary,
        why: d.why,
        failure_message: d.failure_message,
    }
}
