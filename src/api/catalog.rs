//! The endpoint catalogue: the 72 endpoints of docs/API-SPEC.md as data.
//! Router, validation, cache keys, the simulator, README and tests all read this table;
//! nothing about an endpoint is written anywhere else.

use std::sync::LazyLock;

use serde::{Deserialize, Serialize};

/// The five groups of the API, in spec order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Group {
    News,
    Stock,
    Macro,
    Fund,
    Market,
    /// Not a group of the API: the pass-through pseudo-endpoint's.
    Other,
}

impl Group {
    /// Stable label (the path prefix without slash).
    pub fn as_str(self) -> &'static str {
        match self {
            Group::News => "news",
            Group::Stock => "stock",
            Group::Macro => "macro",
            Group::Fund => "fund",
            Group::Market => "market",
            Group::Other => "other",
        }
    }
}

/// How fast an endpoint's data changes; the cache policy gives each class its TTLs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FreshnessClass {
    /// Real-time quotes and indices: a new exchange snapshot about every 3 s in session.
    Live,
    /// Intraday market data: K-lines, capital flow, screening lists, the heat map.
    /// Frozen between the close and the next open.
    Intraday,
    /// News: flash news, headlines, overviews. Keeps flowing when the market is closed.
    News,
    /// Data computed once a day: diagnosis scores, valuation analysis.
    Daily,
    /// Reference lists: classifications, the ETF list, search, basic fund information.
    Reference,
    /// Data tied to periodic reports: financials, shareholders, holdings, forecasts.
    Periodic,
    /// Macro indicators: a release about once a month.
    Macro,
    /// Pages that never change once written: a feed page addressed by its cursor.
    Immutable,
}

impl FreshnessClass {
    /// Every class, in the order of README's tables.
    pub const ALL: [FreshnessClass; 8] = [
        FreshnessClass::Live,
        FreshnessClass::Intraday,
        FreshnessClass::News,
        FreshnessClass::Daily,
        FreshnessClass::Reference,
        FreshnessClass::Periodic,
        FreshnessClass::Macro,
        FreshnessClass::Immutable,
    ];

    /// Stable label for config keys, logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            FreshnessClass::Live => "live",
            FreshnessClass::Intraday => "intraday",
            FreshnessClass::News => "news",
            FreshnessClass::Daily => "daily",
            FreshnessClass::Reference => "reference",
            FreshnessClass::Periodic => "periodic",
            FreshnessClass::Macro => "macro",
            FreshnessClass::Immutable => "immutable",
        }
    }
}

/// What a parameter value must look like, and how it is written in a cache key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParamKind {
    /// A-share code: 6 digits, optionally `.SH`, `.SZ` or `.BJ`; keyed and forwarded
    /// as 6 digits unless the suffix says what the prefix does not (`params::stock_code`).
    StockCode,
    /// Comma-separated stock codes (client order kept).
    StockCodes,
    /// ETF code: 6 digits, optionally `.SH` or `.SZ`; keyed like a stock code.
    FundCode,
    /// A shareholder's code (not a stock code): letters, digits, `.`, `_`, `-`.
    HolderCode,
    /// An opaque identifier such as a theme id: letters, digits, `.`, `_`, `-`.
    Ident,
    /// One of a fixed list of values.
    Choice(&'static [&'static str]),
    /// A decimal integer within bounds (inclusive).
    Int { min: i64, max: i64 },
    /// A real calendar date written `YYYY-MM-DD`.
    Date,
    /// Free text of at most this many characters (may be empty).
    Text { max_chars: usize },
    /// A content hash sent back by a client (hex digits).
    Hash,
}

/// Whether a validated parameter takes part in the cache key (and the upstream request).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyRole {
    /// Part of the key and forwarded upstream.
    Key,
    /// Validated, then left out of the key and not forwarded (the heat map's
    /// `quotedata_hash`: one shared snapshot answers every client, docs/DOMAIN.md §4.4).
    Dropped,
}

/// One path or query parameter of an endpoint.
#[derive(Clone, Copy, Debug)]
pub struct Param {
    pub name: &'static str,
    pub kind: ParamKind,
    pub required: bool,
    /// The spec's default, applied before the key is built so that an absent
    /// parameter and its default share one cache entry.
    pub default: Option<&'static str>,
    pub role: KeyRole,
    /// An empty value means "absent" (the feed's cursor: "omitted or empty").
    pub empty_is_absent: bool,
    /// Accepted spellings and the value they stand for (`fqt=post` is `after`): a
    /// synonym is keyed and forwarded as its value, so both share one entry.
    pub synonyms: &'static [(&'static str, &'static str)],
}

impl Param {
    const fn new(name: &'static str, kind: ParamKind) -> Param {
        Param {
            name,
            kind,
            required: false,
            default: None,
            role: KeyRole::Key,
            empty_is_absent: false,
            synonyms: &[],
        }
    }
    const fn required(self) -> Param {
        Param {
            required: true,
            ..self
        }
    }
    const fn default(self, value: &'static str) -> Param {
        Param {
            default: Some(value),
            ..self
        }
    }
    const fn dropped(self) -> Param {
        Param {
            role: KeyRole::Dropped,
            ..self
        }
    }
    const fn empty_is_absent(self) -> Param {
        Param {
            empty_is_absent: true,
            ..self
        }
    }
    const fn synonyms(self, synonyms: &'static [(&'static str, &'static str)]) -> Param {
        Param { synonyms, ..self }
    }

    /// A valid value for this parameter, used by tests, benches and README examples.
    pub fn example(&self) -> &'static str {
        if let Some(default) = self.default {
            return default;
        }
        match (self.name, self.kind) {
            ("keyword", _) => "银行",
            ("industryName", _) => "银行",
            ("year", _) => "2024",
            ("pageSize", _) => "20",
            ("endDate" | "reportDate", _) => "2024-06-30",
            (_, ParamKind::StockCode) => "600519",
            (_, ParamKind::StockCodes) => "600519,000001.SZ",
            (_, ParamKind::FundCode) => "510300",
            (_, ParamKind::HolderCode) => "80010298",
            (_, ParamKind::Ident) => "T1001",
            (_, ParamKind::Choice(values)) => values[0],
            (_, ParamKind::Int { min, .. }) if min >= 1 => "1",
            (_, ParamKind::Int { .. }) => "0",
            (_, ParamKind::Date) => "2024-06-30",
            (_, ParamKind::Text { .. }) => "",
            (_, ParamKind::Hash) => "0123abcd",
        }
    }
}

/// Largest page size accepted. The spec gives none; this bounds what one client can
/// make the upstream compute and the cache hold (docs/DOMAIN.md: real upstreams cap at 100).
pub const MAX_PAGE_SIZE: i64 = 1000;
/// Most codes in one `codes` list (the spec states no limit; 500 covers a large
/// watchlist and keeps a key under a few KB).
pub const MAX_CODES: usize = 500;

const PERIOD: Param = Param::new("period", ParamKind::Choice(&["day", "week", "month"]));
/// The adjustment of a K-line: forward (`pre`, the upstream's default), backward or
/// none. The real upstream documents backward adjustment as `after`; docs/API-SPEC.md
/// calls it `post`. Both are accepted, and `post` is keyed and forwarded as `after`.
const FQT: Param = Param::new("fqt", ParamKind::Choice(&["pre", "after", "post", "none"]))
    .synonyms(&[("post", "after")]);
/// A K-line's first and last day (the real upstream's newer `from`/`to`).
const FROM: Param = Param::new("from", ParamKind::Date);
const TO: Param = Param::new("to", ParamKind::Date);
const FLOW_TYPE: Param = Param::new("type", ParamKind::Choice(&["1", "2", "3"]));
const PAGE: Param = Param::new(
    "page",
    ParamKind::Int {
        min: 0,
        max: 100_000,
    },
);
const PAGE_INDEX: Param = Param::new(
    "pageIndex",
    ParamKind::Int {
        min: 0,
        max: 100_000,
    },
);
const PAGE_SIZE: Param = Param::new(
    "pageSize",
    ParamKind::Int {
        min: 1,
        max: MAX_PAGE_SIZE,
    },
);
const KEYWORD: Param = Param::new("keyword", ParamKind::Text { max_chars: 64 });
const FILTER: Param = Param::new("filter", ParamKind::Text { max_chars: 512 });

/// The code of a stock, in a path or query.
const STOCK_CODE: Param = Param::new("code", ParamKind::StockCode);
const FUND_CODE: Param = Param::new("code", ParamKind::FundCode);
const THEME_ID: Param = Param::new("themeId", ParamKind::Ident);

/// One endpoint of the API.
#[derive(Debug)]
pub struct Endpoint {
    /// Position in the catalogue; a dense id for per-endpoint tables (metrics, policy).
    pub id: usize,
    /// Path template relative to `/api/v1`, e.g. `/stock/detail/{code}`; also the
    /// endpoint's stable label in logs, metrics and config overrides.
    pub path: String,
    pub group: Group,
    /// Path parameters, in the order they appear in `path`.
    pub path_params: Vec<Param>,
    /// Query parameters, in canonical (key) order.
    pub query: &'static [Param],
    /// Default freshness class.
    pub class: FreshnessClass,
    /// When this query parameter is present and non-empty the answer belongs to
    /// another class (a feed page addressed by a cursor never changes).
    pub class_when_present: Option<(&'static str, FreshnessClass)>,
    /// When this query parameter has this value (or is absent) the answer expires at
    /// the next open whatever its class says: forward-adjusted K-lines are rewritten
    /// on every ex-rights date (docs/DOMAIN.md §7).
    pub until_open_when: Option<(&'static str, &'static str)>,
    /// The one text/event-stream endpoint.
    pub streaming: bool,
    /// What the endpoint returns (the spec's "Returns" column).
    pub summary: String,
}

/// Endpoints are equal when they are the same catalogue row.
impl PartialEq for Endpoint {
    fn eq(&self, other: &Endpoint) -> bool {
        self.id == other.id
    }
}

impl Eq for Endpoint {}

impl Endpoint {
    /// Looks a query parameter up by name.
    pub fn query_param(&self, name: &str) -> Option<&Param> {
        self.query.iter().find(|p| p.name == name)
    }

    /// A valid request target (path and query, relative to `/api/v1`) for this
    /// endpoint: path parameters and required query parameters filled with examples.
    pub fn example_target(&self) -> String {
        let mut target = String::with_capacity(self.path.len() + 32);
        for segment in self.path.split('/').skip(1) {
            target.push('/');
            match param_name(segment) {
                Some(name) => {
                    let param = self
                        .path_params
                        .iter()
                        .find(|p| p.name == name)
                        .expect("path params are derived from the template");
                    target.push_str(param.example());
                }
                None => target.push_str(segment),
            }
        }
        let mut query = form_urlencoded::Serializer::new(String::new());
        let mut any = false;
        for param in self.query.iter().filter(|p| p.required) {
            query.append_pair(param.name, param.example());
            any = true;
        }
        if any {
            target.push('?');
            target.push_str(&query.finish());
        }
        target
    }
}

/// `Some("code")` for a `{code}` template segment.
pub(crate) fn param_name(segment: &str) -> Option<&str> {
    segment.strip_prefix('{')?.strip_suffix('}')
}

/// A row of the static table below; expanded into an [`Endpoint`].
struct Def {
    path: &'static str,
    class: FreshnessClass,
    query: &'static [Param],
    summary: &'static str,
}

const fn def(
    path: &'static str,
    class: FreshnessClass,
    query: &'static [Param],
    summary: &'static str,
) -> Def {
    Def {
        path,
        class,
        query,
        summary,
    }
}

use FreshnessClass::{Daily, Immutable, Intraday, Live, News, Periodic, Reference};

/// The label of the pass-through pseudo-endpoint in metrics, logs and TTL tables.
pub const PASSTHROUGH: &str = "passthrough";

/// The stream endpoint's path.
pub const STREAM_PATH: &str = "/stock/indicator/realtime/sse";

/// Every endpoint but the macro pairs, in spec order.
static DEFS: &[Def] = &[
    // News
    def("/news/overview", News, &[], "Market overview data"),
    def(
        "/news/mainline",
        News,
        &[],
        "Market main-line themes and hot topics",
    ),
    def(
        "/news/topic/library/list",
        Reference,
        &[],
        "Theme library category list",
    ),
    def(
        "/news/topic/library/detail/{themeId}",
        Reference,
        &[],
        "Detail of one theme",
    ),
    def(
        "/news/topic/library/stocks/{themeId}",
        Intraday,
        &[],
        "Stocks associated with the theme",
    ),
    def(
        "/news/headlines",
        News,
        &[PAGE, PAGE_SIZE, KEYWORD.default("新闻联播要闻")],
        "Headline summaries and selected news, paged, filtered by keyword",
    ),
    def(
        "/news/feed",
        News,
        &[Param::new("cursor", ParamKind::Text { max_chars: 128 }).empty_is_absent()],
        "Flash-news and headline stream with cursor pagination",
    ),
    // Stock: basic information
    def(
        "/stock/list",
        Live,
        &[Param::new("codes", ParamKind::StockCodes)],
        "Batch stock information by code",
    ),
    def(
        "/stock/detail/{code}",
        Live,
        &[],
        "Basic information of one stock",
    ),
    def(
        "/stock/search",
        Reference,
        &[KEYWORD],
        "Stocks whose code or name matches the keyword",
    ),
    def(
        "/stock/selection",
        Intraday,
        &[PAGE, PAGE_SIZE, FILTER],
        "Paged stock screening list",
    ),
    // Stock: market data
    def(
        "/stock/kline",
        Intraday,
        &[STOCK_CODE.required(), PERIOD, FQT, FROM, TO],
        "Daily, weekly or monthly K-line with the chosen adjustment",
    ),
    def(
        "/stock/indicator/realtime/{code}",
        Live,
        &[],
        "Real-time quote of one stock",
    ),
    def(
        STREAM_PATH,
        Live,
        &[
            Param::new("codes", ParamKind::StockCodes).required(),
            Param::new("pz", ParamKind::Int { min: 1, max: 100 }).default("20"),
            // EventSource cannot send headers: the token may come as RFC 6750's
            // `access_token` query parameter. Never keyed, never forwarded.
            Param::new("access_token", ParamKind::Text { max_chars: 256 }).dropped(),
        ],
        "Stream of real-time quotes (text/event-stream)",
    ),
    // Stock: financial data
    def(
        "/stock/indicator/financial/{code}",
        Periodic,
        &[],
        "Financial indicators of one stock",
    ),
    def(
        "/stock/business/main/{code}",
        Periodic,
        &[],
        "Main-business composition and revenue structure",
    ),
    // Stock: classification lists
    def(
        "/stock/industry/list",
        Reference,
        &[],
        "Industry classification list",
    ),
    def(
        "/stock/area/list",
        Reference,
        &[],
        "Region classification list",
    ),
    def("/stock/concept/list", Reference, &[], "Concept-board list"),
    def(
        "/stock/style/list",
        Reference,
        &[],
        "Style classification list",
    ),
    // Stock: shareholders
    def(
        "/stock/shareholder/research/{code}",
        Periodic,
        &[Param::new("endDate", ParamKind::Date).required()],
        "Top ten circulating shareholders of the stock",
    ),
    def(
        "/stock/shareholder/list",
        Periodic,
        &[
            Param::new("code", ParamKind::HolderCode),
            Param::new("endDate", ParamKind::Date),
            Param::new("type", ParamKind::Choice(&["top10", "top10Float"])),
            PAGE,
            PAGE_SIZE,
            // Undocumented values: a short free text, keyed and forwarded as given.
            Param::new("holdNumChange", ParamKind::Text { max_chars: 32 }),
        ],
        "Stocks held by a shareholder",
    ),
    def(
        "/stock/shareholder/research/latest/{code}",
        Periodic,
        &[],
        "Latest report date of shareholder research for the stock",
    ),
    // Stock: earnings
    def(
        "/stock/earnings-forecast",
        Periodic,
        &[Param::new("reportDate", ParamKind::Date), PAGE, PAGE_SIZE],
        "Paged earnings-forecast list for a report period",
    ),
    def(
        "/stock/performance/ten-years",
        Periodic,
        &[
            Param::new("industryName", ParamKind::Text { max_chars: 64 }),
            Param::new(
                "year",
                ParamKind::Int {
                    min: 1990,
                    max: 2100,
                },
            ),
            // The column the upstream sorts by (its UPPER_SNAKE names).
            Param::new("sortColumn", ParamKind::Ident).default("PARENT_NI_3Q"),
        ],
        "Ten-year performance by industry and year",
    ),
    def(
        "/stock/performance/ten-years/latest/{code}",
        Periodic,
        &[],
        "Latest report date of ten-year performance for the stock",
    ),
    // Stock: board and industry
    def(
        "/stock/board/info/{code}",
        Intraday,
        &[],
        "Boards and industries the stock belongs to",
    ),
    def(
        "/stock/industry/info/{code}",
        Intraday,
        &[],
        "Industry of the stock, and industry information",
    ),
    // Stock: diagnosis
    def(
        "/stock/diagnosis/comprehensive/{code}",
        Daily,
        &[],
        "Comprehensive diagnosis score",
    ),
    def(
        "/stock/diagnosis/message/{code}",
        Daily,
        &[],
        "News-side diagnosis",
    ),
    def(
        "/stock/diagnosis/financial/evaluation/{code}",
        Daily,
        &[],
        "Financial health and risk analysis",
    ),
    def(
        "/stock/diagnosis/financial/portrait/{code}",
        Daily,
        &[],
        "Detailed financial portrait and trends",
    ),
    // Stock: other
    def(
        "/stock/news",
        News,
        &[STOCK_CODE, PAGE_INDEX, PAGE_SIZE],
        "Paged news related to the stock",
    ),
    def(
        "/stock/theme/core/{code}",
        Periodic,
        &[],
        "Core concepts and themes of the stock",
    ),
    // Fund (ETF)
    def(
        "/fund/all-etf-list",
        Reference,
        &[],
        "Full ETF list, unfiltered",
    ),
    def(
        "/fund/detail/{code}",
        Live,
        &[],
        "Basic information of one fund",
    ),
    def(
        "/fund/selection",
        Intraday,
        &[FILTER],
        "Fund screening list",
    ),
    def(
        "/fund/kline",
        Intraday,
        &[FUND_CODE.required(), PERIOD, FQT, FROM, TO],
        "ETF K-line",
    ),
    def(
        "/fund/holdings/{code}",
        Periodic,
        &[],
        "Holding details (stocks and bonds)",
    ),
    def(
        "/fund/asset-allocation/{code}",
        Periodic,
        &[],
        "Asset allocation structure",
    ),
    def(
        "/fund/industry-allocation/{code}",
        Periodic,
        &[],
        "Industry allocation distribution",
    ),
    def(
        "/fund/transactions/{code}",
        Periodic,
        &[],
        "Historical position-adjustment records",
    ),
    def(
        "/fund/following-index/{code}",
        Reference,
        &[],
        "Information on the tracked index",
    ),
    def(
        "/fund/valuation-analysis/{code}",
        Daily,
        &[],
        "Valuation analysis",
    ),
    // Market
    def(
        "/market/indices",
        Live,
        &[],
        "Real-time data of the major stock indices",
    ),
    def(
        "/market/flow",
        Intraday,
        &[FLOW_TYPE],
        "Capital-flow data by type",
    ),
    def(
        "/market/flow/list",
        Intraday,
        &[FLOW_TYPE],
        "Capital-flow detail list by type",
    ),
    def(
        "/market/hotmap",
        Intraday,
        &[Param::new("quotedata_hash", ParamKind::Hash).dropped()],
        "Heat-map data of the whole market",
    ),
    def(
        "/market/fund-analysis",
        Daily,
        &[],
        "Capital-side analysis data",
    ),
    def(
        "/market/global-index",
        Live,
        &[],
        "Quotes of major global indices",
    ),
];

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

/// The whole catalogue.
#[derive(Debug)]
pub struct Catalog {
    endpoints: Vec<Endpoint>,
    passthrough: Endpoint,
}

static CATALOG: LazyLock<Catalog> = LazyLock::new(Catalog::build);

/// The process-wide catalogue (built once, on first use).
pub fn catalog() -> &'static Catalog {
    &CATALOG
}

impl Catalog {
    fn build() -> Catalog {
        let mut endpoints = Vec::with_capacity(72);
        // Spec order: news and stock, then macro, then fund and market.
        let fund_start = DEFS
            .iter()
            .position(|d| d.path.starts_with("/fund"))
            .expect("the table has fund endpoints");
        let (before, after) = DEFS.split_at(fund_start);
        for d in before {
            endpoints.push(expand(
                d.path.to_owned(),
                d.class,
                d.query,
                d.summary.to_owned(),
            ));
        }
        for (slug, name) in MACRO_INDICATORS {
            endpoints.push(expand(
                format!("/macro/{slug}"),
                FreshnessClass::Macro,
                &[PAGE, PAGE_SIZE],
                format!("{name}: paged table"),
            ));
            endpoints.push(expand(
                format!("/macro/{slug}/series"),
                FreshnessClass::Macro,
                &[],
                format!("{name}: chart series"),
            ));
        }
        for d in after {
            endpoints.push(expand(
                d.path.to_owned(),
                d.class,
                d.query,
                d.summary.to_owned(),
            ));
        }
        for (id, endpoint) in endpoints.iter_mut().enumerate() {
            endpoint.id = id;
        }
        let passthrough = Endpoint {
            id: endpoints.len(),
            path: PASSTHROUGH.to_owned(),
            group: Group::Other,
            path_params: Vec::new(),
            query: &[],
            class: Intraday,
            class_when_present: None,
            until_open_when: None,
            streaming: false,
            summary: "Requests the catalogue does not know, forwarded as they are".to_owned(),
        };
        Catalog {
            endpoints,
            passthrough,
        }
    }

    /// The pseudo-endpoint every pass-through request is counted and cached under
    /// (`[passthrough]`): its id follows the catalogue's, its label is
    /// `passthrough`, never a raw path.
    pub fn passthrough(&self) -> &Endpoint {
        &self.passthrough
    }

    /// Every endpoint that has its own row in per-endpoint tables (counters, TTLs):
    /// the catalogue's, then the pass-through pseudo-endpoint. Ids are dense.
    pub fn with_passthrough(&self) -> impl Iterator<Item = &Endpoint> {
        self.endpoints
            .iter()
            .chain(std::iter::once(&self.passthrough))
    }

    /// All endpoints in spec order.
    pub fn endpoints(&self) -> &[Endpoint] {
        &self.endpoints
    }

    /// The endpoint with this path template, e.g. `/stock/kline`.
    pub fn by_path(&self, path: &str) -> Option<&Endpoint> {
        self.endpoints.iter().find(|e| e.path == path)
    }

    /// Number of endpoints.
    pub fn len(&self) -> usize {
        self.endpoints.len()
    }

    /// Always false: the catalogue is never empty. Present for clippy's `len_without_is_empty`.
    pub fn is_empty(&self) -> bool {
        self.endpoints.is_empty()
    }

    /// The endpoint list as a Markdown table (README's endpoint section is checked
    /// against this by a test).
    pub fn markdown_table(&self) -> String {
        let mut out = String::from(
            "| Path | Query parameters | Freshness class | Returns |\n|---|---|---|---|\n",
        );
        for e in &self.endpoints {
            let params: Vec<String> = e
                .query
                .iter()
                .map(|p| {
                    let mut s = format!("`{}`", p.name);
                    if p.required {
                        s.push_str(" (required)");
                    }
                    if let Some(d) = p.default {
                        s.push_str(&format!(" (default `{d}`)"));
                    }
                    s
                })
                .collect();
            let params = if params.is_empty() {
                "none".to_owned()
            } else {
                params.join(", ")
            };
            let mut class = e.class.as_str().to_owned();
            if let Some((param, other)) = e.class_when_present {
                class.push_str(&format!("; {} with `{param}`", other.as_str()));
            }
            out.push_str(&format!(
                "| `{}` | {params} | {class} | {} |\n",
                e.path, e.summary
            ));
        }
        out
    }
}

fn expand(
    path: String,
    class: FreshnessClass,
    query: &'static [Param],
    summary: String,
) -> Endpoint {
    let group = match path.split('/').nth(1) {
        Some("news") => Group::News,
        Some("stock") => Group::Stock,
        Some("macro") => Group::Macro,
        Some("fund") => Group::Fund,
        Some("market") => Group::Market,
        other => panic!("catalogue path {path} has an unknown group {other:?}"),
    };
    // The spec's resource table: {code} is a stock code under /stock and an ETF code
    // under /fund; {themeId} is a theme.
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
    let class_when_present = (path == "/news/feed").then_some(("cursor", Immutable));
    let until_open_when = query
        .iter()
        .any(|p| p.name == "fqt")
        .then_some(("fqt", "pre"));
    let streaming = path == STREAM_PATH;
    Endpoint {
        id: 0,
        path,
        group,
        path_params,
        query,
        class,
        class_when_present,
        until_open_when,
        streaming,
        summary,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The catalogue holds exactly the spec's 72 endpoints, each path once.
    #[test]
    fn catalogue_has_the_72_spec_endpoints() {
        let c = catalog();
        assert_eq!(c.len(), 72);
        let mut paths: Vec<&str> = c.endpoints().iter().map(|e| e.path.as_str()).collect();
        paths.sort_unstable();
        paths.dedup();
        assert_eq!(paths.len(), 72);
        assert_eq!(c.endpoints().iter().filter(|e| e.streaming).count(), 1);
        let per_group = |g: Group| c.endpoints().iter().filter(|e| e.group == g).count();
        assert_eq!(per_group(Group::News), 7);
        assert_eq!(per_group(Group::Stock), 27);
        assert_eq!(per_group(Group::Macro), 22);
        assert_eq!(per_group(Group::Fund), 10);
        assert_eq!(per_group(Group::Market), 6);
    }

    /// The spec's rules are in the data: required endDate, required codes, keyword default.
    #[test]
    fn spec_rules_are_data() {
        let c = catalog();
        let research = c.by_path("/stock/shareholder/research/{code}").unwrap();
        assert!(research.query_param("endDate").unwrap().required);
        let sse = c.by_path(STREAM_PATH).unwrap();
        assert!(sse.query_param("codes").unwrap().required);
        assert_eq!(sse.query_param("pz").unwrap().default, Some("20"));
        let headlines = c.by_path("/news/headlines").unwrap();
        assert_eq!(
            headlines.query_param("keyword").unwrap().default,
            Some("新闻联播要闻")
        );
        assert!(
            c.by_path("/news/feed")
                .unwrap()
                .query_param("cursor")
                .unwrap()
                .empty_is_absent
        );
    }

    #[test]
    fn example_targets_fill_path_and_required_params() {
        let c = catalog();
        assert_eq!(
            c.by_path("/stock/detail/{code}").unwrap().example_target(),
            "/stock/detail/600519"
        );
        assert_eq!(
            c.by_path("/stock/kline").unwrap().example_target(),
            "/stock/kline?code=600519"
        );
    }
}
