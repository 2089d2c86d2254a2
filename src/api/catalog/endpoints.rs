//! The rows of the catalogue: every documented GET endpoint (docs/upstream-endpoints.json)
//! with its parameters as documented (types, enums, defaults, required flags), its
//! freshness class and why, when its answers become final, and its upstream timeout.
//! A data table: it is long because the API is.

use super::{
    ClassRule, Endpoint, FreshnessClass, Group, MAX_ID, MAX_PAGE, MAX_PAGE_SIZE, Param, ParamKind,
    Patience, Settles, Successor, VenueRule, param_name,
};
use crate::api::code::CodeRule;

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

/// News, then stock, in the docs' order (the macro pairs and the fund and market
/// groups follow in [`all`]).
static NEWS_AND_STOCK: &[Def] = &[
    // News
    def("/news/overview", News, &[], "Market overview data", "news flows day and night"),
    def(
        "/news/mainline",
        News,
        &[],
        "Market main-line themes and hot topics",
        "news flows day and night",
    ),
    def(
        "/news/topic/library/list",
        Reference,
        &[],
        "Theme library category list",
        LIST,
    ),
    def(
        "/news/topic/library/detail/{themeId}",
        Reference,
        &[],
        "Detail of one theme",
        LIST,
    )
    .fails_with("Failed to get topic library detail"),
    def(
        "/news/topic/library/stocks/{themeId}",
        Intraday,
        &[],
        "Stocks associated with the theme",
        BOARD,
    ),
    def(
        "/news/headlines",
        News,
        &[
            PAGE.default("0"),
            PAGE_SIZE.default("10"),
            KEYWORD.default("新闻联播要闻"),
        ],
        "Headline summaries and selected news, paged, filtered by keyword",
        "news flows day and night",
    ),
    def(
        "/news/feed",
        News,
        &[Param::new("cursor", ParamKind::Text { max_chars: 128 }).empty_is_absent()],
        "Flash-news and headline stream with cursor pagination",
        "the head page is news; a page addressed by its cursor never changes",
    )
    .rules(&[ClassRule::Present("cursor", Immutable)]),
    def(
        "/news/search",
        News,
        &[
            PAGE.default("0"),
            PAGE_SIZE.default("20"),
            KEYWORD.default("新闻联播要闻"),
        ],
        "Keyword search over news summaries, 0-based pages",
        "a search over news: new items arrive day and night",
    ),
    def(
        "/news/topic-subject",
        News,
        &[
            text("subjectKey", 64),
            id("subjectId"),
            PAGE_SIZE.default("20"),
            // The time cursor: Unix seconds of the last item seen.
            id("lastTime"),
        ],
        "Topic/subject news stream (morning_brief...) with a lastTime cursor",
        "the head page is news; a page addressed by its time cursor never changes",
    )
    .one_of(&["subjectKey", "subjectId"])
    .rules(&[ClassRule::Present("lastTime", Immutable)]),
    // Stock: basic information
    def(
        "/stock/list",
        Live,
        &[Param::new("codes", ParamKind::Codes(CodeRule::Stock)).required()],
        "Batch stock information by code",
        QUOTE,
    ),
    def(
        "/stock/detail/{code}",
        Live,
        &[],
        "Basic information of one stock",
        QUOTE,
    ),
    def(
        "/stock/search",
        Reference,
        &[KEYWORD.required()],
        "Stocks whose code or name matches the keyword",
        LIST,
    ),
    def(
        "/stock/selection",
        Intraday,
        &[PAGE.default("1"), PAGE_SIZE.default("50"), FILTER],
        "Paged stock screening list",
        BOARD,
    ),
    // Stock: market data
    def(
        "/stock/kline",
        Intraday,
        &[KLINE_CODE.required(), STOCK_PERIOD, FQT, FROM, TO],
        "K-line (minute, day, week, month) of an A-share, HK or US code, with the chosen adjustment",
        "the last bar moves in session; minute bars have their own class; a past range is final",
    )
    .rules(&[ClassRule::OneOf("period", MINUTE_PERIODS, Minute)])
    .venue(VenueRule::OfCode("code"))
    .settles(RANGE_ENDED)
    .long()
    .fails_with("Failed to fetch kline"),
    def(
        "/stock/indicator/realtime/{code}",
        Live,
        &[],
        "Real-time quote of one stock",
        QUOTE,
    ),
    def(
        STREAM_PATH,
        Live,
        &[
            Param::new("codes", ParamKind::Codes(CodeRule::Stock)).required(),
            Param::new("pz", ParamKind::Int { min: 1, max: 100 }).default("20"),
            // EventSource cannot send headers: the token may come as RFC 6750's
            // `access_token` query parameter. Never keyed, never forwarded.
            Param::new("access_token", ParamKind::Text { max_chars: 256 }).dropped(),
        ],
        "Stream of real-time quotes (text/event-stream)",
        "never cached: one upstream poll fanned out",
    ),
    // Stock: financial data
    def(
        "/stock/indicator/financial/{code}",
        Periodic,
        &[],
        "Financial indicators of one stock",
        REPORTS,
    ),
    def(
        "/stock/business/main/{code}",
        Periodic,
        &[],
        "Main-business composition and revenue structure",
        REPORTS,
    ),
    def(
        "/stock/financial/snapshot/{code}",
        Periodic,
        &[Param::new("reportDate", ParamKind::Date).required()],
        "One annual consolidated financial snapshot (millions of yuan)",
        REPORTS,
    )
    .settles(Settles {
        param: "reportDate",
        months: 16,
        why: "16 months after `reportDate` (the annual report is due in 4, and the next one may restate it)",
    }),
    def(
        "/stock/financial/history/{code}",
        Periodic,
        FINANCIAL_SERIES,
        "Annual consolidated financial history",
        REPORTS,
    ),
    def(
        "/stock/financial/statements/{code}",
        Periodic,
        FINANCIAL_SERIES,
        "Main indicators and the balance, income and cash-flow statements (large)",
        REPORTS,
    ),
    def(
        "/stock/financial/ratio/{code}",
        Periodic,
        FINANCIAL_SERIES,
        "Common-size statements: percent of revenue per report date",
        REPORTS,
    ),
    def(
        "/stock/financial/dupont/{code}",
        Periodic,
        FINANCIAL_SERIES,
        "Annual DuPont analysis series",
        REPORTS,
    ),
    // Stock: classification lists
    def(
        "/stock/industry/list",
        Reference,
        &[],
        "Industry classification list",
        LIST,
    ),
    def(
        "/stock/area/list",
        Reference,
        &[],
        "Region classification list",
        LIST,
    ),
    def("/stock/concept/list", Reference, &[], "Concept-board list", LIST),
    def(
        "/stock/style/list",
        Reference,
        &[],
        "Style classification list",
        LIST,
    ),
    // Stock: shareholders
    def(
        "/stock/shareholder/research/{code}",
        Periodic,
        &[END_DATE.required()],
        "Top ten circulating shareholders of the stock",
        REPORTS,
    )
    .settles(PERIOD_REPORTED),
    def(
        "/stock/shareholder/list",
        Periodic,
        &[
            // A shareholder's code, not a security's: its form is undocumented.
            text("code", 64),
            END_DATE,
            Param::new("type", ParamKind::Choice(&["top10", "top10Float"])),
            PAGE,
            PAGE_SIZE,
            // Undocumented values: a short free text, keyed and forwarded as given.
            text("holdNumChange", 32),
        ],
        "Stocks held by a shareholder",
        REPORTS,
    )
    .settles(PERIOD_REPORTED),
    def(
        "/stock/shareholder/research/latest/{code}",
        Periodic,
        &[],
        "Latest report date of shareholder research for the stock",
        REPORTS,
    ),
    // Stock: earnings
    def(
        "/stock/earnings-forecast",
        Periodic,
        // The report period's form is undocumented ("报告期").
        &[text("reportDate", 32), PAGE, PAGE_SIZE],
        "Paged earnings-forecast list for a report period",
        REPORTS,
    )
    .settles(Settles {
        param: "reportDate",
        months: 4,
        why: "4 months after `reportDate` (forecasts of a period end with its report, due by then)",
    }),
    def(
        "/stock/performance/ten-years",
        Periodic,
        &[
            Param::new("industryName", ParamKind::Text { max_chars: 64 }).required(),
            YEAR.required(),
            // The column the upstream sorts by (its UPPER_SNAKE names).
            text("sortColumn", 64).default("PARENT_NI_3Q"),
        ],
        "Ten-year performance by industry and year",
        REPORTS,
    )
    .fails_with("Failed to get performance ten years"),
    def(
        "/stock/performance/ten-years/latest/{code}",
        Periodic,
        &[],
        "Latest report date of ten-year performance for the stock",
        REPORTS,
    ),
    def(
        "/stock/corporate-actions",
        Periodic,
        &[STOCK_CODE.required(), date_text("from"), date_text("to")],
        "Corporate actions (dividends, splits) by ex-date: a bare array",
        "plans come with reports; a past range of ex-dates is final",
    )
    .settles(Settles {
        param: "to",
        months: 0,
        why: "a range of ex-dates that ended before today",
    }),
    def(
        "/stock/valuation/historical-pe",
        Daily,
        &[
            STOCK_CODE.required(),
            // Months of history ("60"): a string in the docs.
            text("interval", 16).default("60"),
        ],
        "Historical PE-TTM series and percentile statistics",
        "a daily series: one new point per trading day",
    ),
    def(
        "/stock/peers/{code}",
        Periodic,
        &[
            YEAR,
            Param::new("topN", ParamKind::Int { min: 1, max: 20 }),
            text("sortColumn", 64),
        ],
        "Automatic peer-comparison pool in the same industry",
        REPORTS,
    ),
    def(
        "/stock/company/operations/{code}",
        Daily,
        &[
            YEAR,
            Param::new("topN", ParamKind::Int { min: 1, max: 20 }).default("10"),
        ],
        "Company operations profile (F10 aggregate: business, themes, industry, peers, signals)",
        "an aggregate with daily signals",
    ),
    def(
        "/stock/industry/cycle/{code}",
        Periodic,
        &[YEAR],
        "Industry-cycle snapshot of the stock's industry",
        REPORTS,
    ),
    def(
        "/stock/governance/events/{code}",
        Filings,
        &[
            YEAR,
            Param::new("limit", ParamKind::Int { min: 1, max: 30 }),
            TIME_RANGE,
            Param::new("dedupe", ParamKind::Choice(&["true", "false"])),
            Param::new("source", ParamKind::Choice(&["aggregate", "cninfo", "sse"])),
            date_text("startDate"),
            date_text("endDate"),
            STOCK_NAME,
        ],
        "Negative governance events (cninfo and SSE), with per-source status",
        "announcements arrive through the day and evening",
    ),
    def(
        "/stock/regulatory/events",
        Filings,
        &[
            STOCK_CODE.required(),
            Param::new(
                "source",
                ParamKind::Choice(&["aggregate", "cninfo", "sse", "szse", "bse"]),
            ),
            Param::new(
                "exchange",
                ParamKind::Choice(&["auto", "sse", "szse", "bse", "all"]),
            ),
            // Comma-separated kinds (inquiry, regulatory_measure, discipline...).
            text("eventKinds", 128),
            date_text("startDate"),
            date_text("endDate"),
            PAGE,
            Param::new("limit", ParamKind::Int { min: 1, max: 100 }),
            KEYWORD,
            STOCK_NAME,
        ],
        "Regulatory, inquiry and disciplinary events, with per-source status",
        "announcements arrive through the day and evening",
    ),
    def(
        "/stock/report/search",
        Filings,
        &[
            STOCK_CODE.required(),
            // Chinese category names, `;` between several (年报;半年报).
            text("category", 128).required(),
            YEAR,
            count("limit"),
            KEYWORD,
            TIME_RANGE.default("3y"),
            STOCK_NAME,
            text("item", 64),
        ],
        "Candidate announcement and periodic-report PDF links (cninfo)",
        "announcements arrive through the day and evening",
    ),
    def(
        "/stock/topic/operations-insight/{code}",
        Filings,
        &[
            YEAR,
            Param::new("reportDate", ParamKind::Period),
            // No enum here in the docs (the governance events document one).
            text("timeRange", 16),
            count("governanceLimit"),
            count("forecastPageSize"),
        ],
        "Operations and management insight (industry cycle, governance timeline, guidance, operations)",
        "aggregates governance events and forecasts: announcements arrive through the day",
    ),
    def(
        "/stock/screener/universe",
        Daily,
        &[
            Param::new("market", ParamKind::Choice(&["CN_A", "HK"])).default("CN_A"),
            PAGE.default("1"),
            Param::new("pageSize", ParamKind::Int { min: 1, max: 500 }).default("100"),
            FILTER,
        ],
        "Normalised screener universe (CN_A or HK), up to 500 rows a page; page until total",
        "a daily snapshot of fundamentals and the close",
    )
    .venue(VenueRule::HongKongFor("market", &["HK"])),
    // Stock: board and industry
    def(
        "/stock/board/info/{code}",
        Intraday,
        &[],
        "Boards and industries the stock belongs to",
        BOARD,
    ),
    def(
        "/stock/industry/info/{code}",
        Intraday,
        &[],
        "Industry of the stock, and industry information",
        BOARD,
    ),
    // Stock: diagnosis
    def(
        "/stock/diagnosis/comprehensive/{code}",
        Daily,
        &[],
        "Comprehensive diagnosis score",
        DAILY,
    ),
    def(
        "/stock/diagnosis/message/{code}",
        Daily,
        &[],
        "News-side diagnosis",
        DAILY,
    ),
    def(
        "/stock/diagnosis/financial/evaluation/{code}",
        Daily,
        &[],
        "Financial health and risk analysis",
        DAILY,
    ),
    def(
        "/stock/diagnosis/financial/portrait/{code}",
        Daily,
        &[],
        "Detailed financial portrait and trends",
        DAILY,
    )
    .fails_with("Failed to get financial portrait"),
    // Stock: other
    def(
        "/stock/news",
        News,
        &[STOCK_CODE.required(), page("pageIndex"), PAGE_SIZE],
        "Paged news related to the stock",
        "news flows day and night",
    ),
    def(
        "/stock/theme/core/{code}",
        Periodic,
        &[],
        "Core concepts and themes of the stock",
        REPORTS,
    ),
];

/// The fund and market groups.
static FUND_AND_MARKET: &[Def] = &[
    // Fund (ETF)
    def(
        "/fund/all-etf-list",
        Reference,
        &[],
        "Full ETF list, unfiltered",
        LIST,
    ),
    def(
        "/fund/detail/{code}",
        Live,
        &[],
        "Basic information of one fund",
        QUOTE,
    ),
    def(
        "/fund/selection",
        Intraday,
        &[FILTER],
        "Fund screening list",
        BOARD,
    ),
    def(
        "/fund/kline",
        Intraday,
        // The docs give no `from`/`to` here (the stock K-line has them), and the
        // upstream refuses what its docs do not list.
        &[FUND_CODE.required(), FUND_PERIOD, FQT.default("pre")],
        "ETF K-line (day, week, month)",
        "the last bar moves in session",
    )
    .long(),
    def(
        "/fund/holdings/{code}",
        Periodic,
        &[],
        "Holding details (stocks and bonds)",
        REPORTS,
    ),
    def(
        "/fund/asset-allocation/{code}",
        Periodic,
        &[],
        "Asset allocation structure",
        REPORTS,
    ),
    def(
        "/fund/industry-allocation/{code}",
        Periodic,
        &[],
        "Industry allocation distribution",
        REPORTS,
    ),
    def(
        "/fund/transactions/{code}",
        Periodic,
        &[],
        "Historical position-adjustment records",
        REPORTS,
    ),
    def(
        "/fund/following-index/{code}",
        Reference,
        &[],
        "Information on the tracked index",
        LIST,
    ),
    def(
        "/fund/valuation-analysis/{code}",
        Daily,
        &[],
        "Valuation analysis",
        DAILY,
    ),
    // Market
    def(
        "/market/indices",
        Live,
        &[],
        "Real-time data of the major stock indices",
        QUOTE,
    ),
    def(
        "/market/flow",
        Live,
        &[FLOW_TYPE],
        "Capital flow by type 1/2/3 (retired from the docs: /market/sector-flow/summary)",
        "kept for clients of the original contract: its successor's request (type 1/2/3 = dimension region/industry/concept), key and class",
    )
    .answered_as("/market/sector-flow/summary"),
    def(
        "/market/flow/list",
        Live,
        &[FLOW_TYPE],
        "Capital-flow list by type 1/2/3 (retired from the docs: /market/sector-flow/list)",
        "kept for clients of the original contract: its successor's request (type 1/2/3 = dimension region/industry/concept; the first page of 50), key and class",
    )
    .answered_as("/market/sector-flow/list"),
    def(
        "/market/sector-flow/summary",
        Live,
        &[DIMENSION],
        "Sector capital-flow summary by dimension (region, industry, concept)",
        "sector flows move every few seconds in session",
    ),
    def(
        "/market/sector-flow/list",
        Live,
        &[DIMENSION, PAGE.default("1"), PAGE_SIZE.default("50")],
        "Paged sector capital-flow list by dimension, split by order size",
        "sector flows move every few seconds in session",
    ),
    def(
        "/market/stocks/realtime-list",
        Live,
        &[
            Param::new(
                "market",
                ParamKind::Choice(&["cn_a", "bj", "cyb", "kcb", "hk", "hk_main", "hk_gem"]),
            )
            .required(),
            PAGE.default("1"),
            PAGE_SIZE.default("50"),
        ],
        "Real-time quote list of a whole market or board (Eastmoney x100 integers)",
        QUOTE,
    )
    .venue(VenueRule::HongKongFor("market", HK_MARKETS)),
    def(
        "/market/hotmap",
        Intraday,
        // The hash of the previous answer: its form is undocumented, and it is never
        // keyed nor forwarded.
        &[text("quotedata_hash", 128).dropped()],
        "Heat-map data of the whole market",
        BOARD,
    ),
    def(
        "/market/fund-analysis",
        Daily,
        &[],
        "Capital-side analysis data",
        DAILY,
    ),
    def(
        "/market/global-index",
        Live,
        &[],
        "Quotes of major global indices",
        "overseas markets trade while China is closed",
    ),
    def(
        "/market/trading-calendar",
        Calendar,
        &[
            // The docs list HK and US too, and say the upstream answers them 400.
            Param::new("market", ParamKind::Choice(&["CN_A"])).required(),
            FROM.required(),
            TO.required(),
        ],
        "Trading calendar of the A-share market for a date range: a bare array",
        "published once a year; a past range is final",
    )
    .settles(Settles {
        param: "to",
        months: 0,
        why: "a range that ended before today",
    }),
];

/// Every endpoint in the docs' order: news and stock, then macro, then fund and market.
pub(super) fn all() -> Vec<Endpoint> {
    let mut endpoints = Vec::with_capacity(96);
    for d in NEWS_AND_STOCK {
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
    for d in FUND_AND_MARKET {
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
