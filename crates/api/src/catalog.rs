//! The endpoint catalogue: every GET endpoint the upstream documents today
//! (docs/upstream-endpoints.json), plus the two it has retired, as data. Router,
//! validation, cache keys and freshness, the upstream timeouts, the OpenAPI document,
//! manual (docs/endpoints.md) and tests all read this table; nothing about an endpoint is written
//! anywhere else. The rows themselves are in [`endpoints`].

mod endpoints;

use std::sync::LazyLock;

use serde::{Deserialize, Serialize};

use crate::code::CodeRule;

pub use endpoints::{MACRO_INDICATORS, REFUSED, STREAM_PATH};

/// The five groups of the API, in the docs' order.
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

/// How fast an endpoint's data changes; the cache policy gives each class its TTLs
/// (`[freshness.classes.<label>]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FreshnessClass {
    /// Real-time quotes, indices, whole-market quote lists and sector flows: a new
    /// exchange snapshot about every 3 s in session, frozen between sessions.
    Live,
    /// Minute K-lines: the last bar moves with every trade in session, and a new bar
    /// starts every minute; the bars of a closed session stand until the next one.
    Minute,
    /// Intraday market data: daily and longer K-lines, screening lists, the heat map,
    /// boards. Frozen between the close and the next open.
    Intraday,
    /// News: flash news, headlines, searches, overviews. Keeps flowing when the
    /// market is closed.
    News,
    /// Announcements and what is read out of them: governance and regulatory events,
    /// report searches. Published through the day and evening, mostly after the close.
    Filings,
    /// Data computed once a day: diagnosis scores, valuation analysis, PE history.
    Daily,
    /// Reference lists: classifications, the ETF list, search, basic fund information.
    Reference,
    /// The trading calendar: the exchanges publish the next year's each December.
    Calendar,
    /// Data tied to periodic reports: financials, shareholders, holdings, forecasts.
    Periodic,
    /// Macro indicators: a release about once a month.
    Macro,
    /// Answers that can no longer change: a page addressed by its cursor, a K-line
    /// range that ended before today (not forward-adjusted), a past calendar, a
    /// closed period's report (see [`Settles`]).
    Immutable,
}

impl FreshnessClass {
    /// Every class, in the order of the manual's tables.
    pub const ALL: [FreshnessClass; 11] = [
        FreshnessClass::Live,
        FreshnessClass::Minute,
        FreshnessClass::Intraday,
        FreshnessClass::News,
        FreshnessClass::Filings,
        FreshnessClass::Daily,
        FreshnessClass::Reference,
        FreshnessClass::Calendar,
        FreshnessClass::Periodic,
        FreshnessClass::Macro,
        FreshnessClass::Immutable,
    ];

    /// Stable label for config keys, logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            FreshnessClass::Live => "live",
            FreshnessClass::Minute => "minute",
            FreshnessClass::Intraday => "intraday",
            FreshnessClass::News => "news",
            FreshnessClass::Filings => "filings",
            FreshnessClass::Daily => "daily",
            FreshnessClass::Reference => "reference",
            FreshnessClass::Calendar => "calendar",
            FreshnessClass::Periodic => "periodic",
            FreshnessClass::Macro => "macro",
            FreshnessClass::Immutable => "immutable",
        }
    }

    /// Its position in [`ALL`](Self::ALL) (per-class tables are indexed by it).
    pub fn index(self) -> usize {
        self as usize
    }
}

/// What a parameter value must look like, and how it is written in a cache key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParamKind {
    /// A security code under a rule ([`CodeRule`]): accepted as people type it,
    /// keyed and forwarded in the form the upstream documents.
    Code(CodeRule),
    /// Comma-separated codes under a rule (client order kept).
    Codes(CodeRule),
    /// An opaque identifier in a path, such as a theme id: letters, digits, `.`, `_`,
    /// `-` (nothing that needs escaping, nothing that could change the path).
    Ident,
    /// One of a fixed list of values: the documented enum (or `true`/`false`).
    Choice(&'static [&'static str]),
    /// A decimal integer within bounds (inclusive): the documented range, else one
    /// of [`INTEGER_BOUNDS`].
    Int { min: i64, max: i64 },
    /// A real calendar date written `YYYY-MM-DD`, where the docs state that format.
    /// Empty is absent.
    Date,
    /// A report period: a real month `YYYYMM` or a real date `YYYY-MM-DD`, as the docs
    /// state it. Empty is absent.
    Period,
    /// Free text of at most this many characters (may be empty, and an empty value
    /// is a value): every string whose form the docs leave open. The length bound is
    /// the only restriction, and keeps a key under a few KB.
    Text { max_chars: usize },
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
    /// The documented default, applied before the key is built so that an absent
    /// parameter and its default share one cache entry (and the upstream is sent it).
    pub default: Option<&'static str>,
    pub role: KeyRole,
    /// An empty value means "absent": the feed's cursor ("omitted or empty"), and a
    /// date or period, which an empty text cannot be (clients of the docs send
    /// `from=&to=` on every K-line). Elsewhere an empty value is what the upstream's
    /// validation (NestJS, class-validator's `@IsOptional` skips only null and
    /// undefined) makes of it: a text, or a refused number or choice.
    pub empty_is_absent: bool,
    /// Accepted spellings and the value they stand for (`fqt=post` is `after`): a
    /// synonym is keyed and forwarded as its value, so both share one entry.
    pub synonyms: &'static [(&'static str, &'static str)],
}

impl Param {
    pub(crate) const fn new(name: &'static str, kind: ParamKind) -> Param {
        Param {
            name,
            kind,
            required: false,
            default: None,
            role: KeyRole::Key,
            empty_is_absent: matches!(kind, ParamKind::Date | ParamKind::Period),
            synonyms: &[],
        }
    }
    pub(crate) const fn required(self) -> Param {
        Param {
            required: true,
            ..self
        }
    }
    pub(crate) const fn default(self, value: &'static str) -> Param {
        Param {
            default: Some(value),
            ..self
        }
    }
    pub(crate) const fn dropped(self) -> Param {
        Param {
            role: KeyRole::Dropped,
            ..self
        }
    }
    pub(crate) const fn empty_is_absent(self) -> Param {
        Param {
            empty_is_absent: true,
            ..self
        }
    }
    pub(crate) const fn synonyms(self, synonyms: &'static [(&'static str, &'static str)]) -> Param {
        Param { synonyms, ..self }
    }

    /// A valid value for this parameter, used by tests, benches and the manual's examples.
    pub fn example(&self) -> &'static str {
        if let Some(default) = self.default {
            return default;
        }
        match (self.name, self.kind) {
            ("keyword", _) => "银行",
            ("industryName", _) => "银行",
            ("category", _) => "年报",
            ("year", _) => "2024",
            ("pageSize", _) => "20",
            ("endDate" | "reportDate", _) => "2024-06-30",
            ("from", _) => "2024-01-01",
            ("to", _) => "2024-12-31",
            ("subjectKey", _) => "morning_brief",
            ("code", ParamKind::Text { .. }) => "80010298",
            ("quotedata_hash", _) => "0123abcd",
            (_, ParamKind::Code(CodeRule::Fund)) => "510300",
            (_, ParamKind::Code(_)) => "600519",
            (_, ParamKind::Codes(_)) => "600519,000001.SZ",
            (_, ParamKind::Ident) => "T1001",
            (_, ParamKind::Choice(values)) => values[0],
            (_, ParamKind::Int { min, .. }) if min >= 1 => "1",
            (_, ParamKind::Int { .. }) => "0",
            (_, ParamKind::Date | ParamKind::Period) => "2024-06-30",
            (_, ParamKind::Text { .. }) => "",
        }
    }
}

/// A rule that puts one request's answer in another class than its endpoint's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClassRule {
    /// A non-empty value of the parameter: a page addressed by its cursor never changes.
    Present(&'static str, FreshnessClass),
    /// The parameter has one of these values (a minute `period`).
    OneOf(&'static str, &'static [&'static str], FreshnessClass),
}

/// When an answer can no longer change: once the date where its market trades (China
/// for A-shares and HK, New York for US codes) is past the date in `param` plus
/// `months`, an answer fetched then is [`FreshnessClass::Immutable`]. Never for a
/// forward-adjusted K-line (`fqt=pre`, or `fqt` absent), which every ex-dividend
/// date rewrites.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settles {
    /// The date parameter that bounds the data (`to`, `reportDate`, `endDate`).
    pub param: &'static str,
    /// How long after that date the data can still change, in months (0: it is
    /// final from the next day on).
    pub months: u32,
    /// Why, for the manual and the OpenAPI document.
    pub why: &'static str,
}

/// Which market's sessions an answer follows when it is not the A-share market's
/// (`market::Venue`): whether it is in session, when it next opens, on which
/// date a range ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VenueRule {
    /// The market of the code in this parameter: Hong Kong for an HK code, New York
    /// for a US secid, else the A-share market.
    OfCode(&'static str),
    /// Hong Kong's when this parameter has one of these values.
    HongKongFor(&'static str, &'static [&'static str]),
}

/// The endpoint that replaced a retired one in the docs: a request of the retired
/// endpoint is validated as given, then translated and answered as the successor's
/// (its key, class, lifetimes and upstream path), so the retired path never depends
/// on the upstream still serving what its docs removed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Successor {
    /// The successor's path template.
    pub path: &'static str,
    /// The retired query parameter, the successor's that replaced it, and what each
    /// retired value became.
    pub renamed: (
        &'static str,
        &'static str,
        &'static [(&'static str, &'static str)],
    ),
}

/// How long the upstream may take to answer an endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Patience {
    /// `upstream.timeout_ms` (10 s by default): what the docs' clients wait.
    Standard,
    /// `upstream.long_timeout_ms` (90 s by default): a long K-line history can take
    /// the upstream far longer, and the docs' clients wait up to 90 s for it.
    Long,
}

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
    /// At least one of these query parameters is required (the docs' "one of").
    pub one_of: &'static [&'static str],
    /// Default freshness class.
    pub class: FreshnessClass,
    /// Rules that give one request's answer another class, first match wins.
    pub class_rules: &'static [ClassRule],
    /// When this query parameter has this value (or is absent) the answer expires at
    /// the next open whatever its class says, and never settles: forward-adjusted
    /// K-lines are rewritten on every ex-rights date (docs/DOMAIN.md §7).
    pub until_open_when: Option<(&'static str, &'static str)>,
    /// When an answer of this endpoint becomes final.
    pub settles: Option<Settles>,
    /// The endpoint its requests are answered as (a retired endpoint's).
    pub successor: Option<Successor>,
    /// Whose sessions its answers follow, when some are not the A-share market's.
    pub venue: Option<VenueRule>,
    /// Its upstream timeout.
    pub patience: Patience,
    /// The one text/event-stream endpoint.
    pub streaming: bool,
    /// What the endpoint returns.
    pub summary: String,
    /// Why it has its class (the endpoint table of docs/endpoints.md).
    pub why: &'static str,
    /// The `message` the upstream documents when it fails here (`Failed to fetch
    /// kline`), else its transport failure's (`socket hang up`): what the
    /// upstream-compatible error mode answers with.
    pub failure_message: &'static str,
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

    /// Every class an answer of this endpoint can have: its own, those of its rules,
    /// and [`FreshnessClass::Immutable`] when it settles.
    pub fn classes(&self) -> Vec<FreshnessClass> {
        let mut classes = vec![self.class];
        for rule in self.class_rules {
            let class = match *rule {
                ClassRule::Present(_, class) | ClassRule::OneOf(_, _, class) => class,
            };
            if !classes.contains(&class) {
                classes.push(class);
            }
        }
        if self.settles.is_some() && !classes.contains(&FreshnessClass::Immutable) {
            classes.push(FreshnessClass::Immutable);
        }
        classes
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
        let first_of = self.one_of.first().copied();
        for param in self
            .query
            .iter()
            .filter(|p| p.required || Some(p.name) == first_of)
        {
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

/// The `/`-separated segments of `path` after its leading `/`, cut by a byte
/// scan: they are short, and `str::split` sets up a searcher for each one (about
/// 80 instructions a segment, on every miss).
pub(crate) fn segments(path: &str) -> impl Iterator<Item = &str> {
    let mut rest = Some(path.strip_prefix('/').unwrap_or(path));
    std::iter::from_fn(move || {
        let (segment, tail) = split_slash(rest?);
        rest = tail;
        Some(segment)
    })
}

/// `s` before its first `/`, and what follows that `/` if there is one.
pub(crate) fn split_slash(s: &str) -> (&str, Option<&str>) {
    match s.bytes().position(|b| b == b'/') {
        Some(i) => (&s[..i], Some(&s[i + 1..])),
        None => (s, None),
    }
}

/// `Some("code")` for a `{code}` template segment.
pub(crate) fn param_name(segment: &str) -> Option<&str> {
    segment.strip_prefix('{')?.strip_suffix('}')
}

/// Largest page size accepted where the docs state none. This bounds what one client
/// can make the upstream compute and the cache hold (docs/DOMAIN.md: real upstreams
/// cap at 100; the screener documents 500).
pub const MAX_PAGE_SIZE: i64 = 1000;
/// Most codes in one `codes` list (the docs state no limit; 500 covers a large
/// watchlist and keeps a key under a few KB).
pub const MAX_CODES: usize = 500;

/// The deepest page accepted where the docs state no bound.
pub const MAX_PAGE: i64 = 100_000;
/// The largest identifier or Unix time accepted: twelve digits.
pub const MAX_ID: i64 = 999_999_999_999;

/// The bounds mdproxy puts on an integer parameter whose range the docs do not
/// state, each with why: the only restrictions beyond the documented ones (a test
/// checks every integer parameter against the docs and this table).
pub const INTEGER_BOUNDS: [(i64, i64, &str); 3] = [
    (
        0,
        MAX_PAGE,
        "a page number (0- or 1-based as the endpoint counts): at most 100,000 pages deep",
    ),
    (
        1,
        MAX_PAGE_SIZE,
        "a count (page size, limit, years, rows): at least one, at most 1,000, so one request cannot make the upstream compute, or the cache hold, an unbounded answer",
    ),
    (
        0,
        MAX_ID,
        "an identifier or a Unix time: any non-negative integer of up to twelve digits",
    ),
];

/// The label of the pass-through pseudo-endpoint in metrics, logs and TTL tables.
pub const PASSTHROUGH: &str = "passthrough";

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
        let mut endpoints = endpoints::all();
        for (id, endpoint) in endpoints.iter_mut().enumerate() {
            endpoint.id = id;
        }
        let passthrough = Endpoint {
            id: endpoints.len(),
            path: PASSTHROUGH.to_owned(),
            group: Group::Other,
            path_params: Vec::new(),
            query: &[],
            one_of: &[],
            class: FreshnessClass::Intraday,
            class_rules: &[],
            until_open_when: None,
            settles: None,
            successor: None,
            venue: None,
            patience: Patience::Standard,
            streaming: false,
            summary: "Requests the catalogue does not know, forwarded as they are".to_owned(),
            why: "passthrough.class",
            failure_message: endpoints::TRANSPORT_FAILURE,
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

    /// All endpoints in the docs' order.
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

    /// The endpoint list as a Markdown table (docs/endpoints.md's table is checked
    /// against this by a test).
    pub fn markdown_table(&self) -> String {
        let mut out = String::from(
            "| Path | Query parameters | Class | Why | Returns |\n|---|---|---|---|---|\n",
        );
        for e in &self.endpoints {
            let mut params: Vec<String> = e
                .query
                .iter()
                .filter(|p| p.role == KeyRole::Key || e.streaming)
                .map(|p| {
                    let mut s = format!("`{}`", p.name);
                    if p.required {
                        s.push_str(" (required)");
                    }
                    if let Some(d) = p.default {
                        s.push_str(&format!(" (default `{d}`)"));
                    }
                    if let ParamKind::Choice(values) = p.kind
                        && values.len() <= 8
                    {
                        s.push_str(&format!(": {}", values.join("/")));
                    }
                    s
                })
                .collect();
            if !e.one_of.is_empty() {
                params.push(format!("one of {} required", e.one_of.join(", ")));
            }
            let params = if params.is_empty() {
                "none".to_owned()
            } else {
                params.join(", ")
            };
            let mut class = e.class.as_str().to_owned();
            for rule in e.class_rules {
                match *rule {
                    ClassRule::Present(param, other) => {
                        class.push_str(&format!("; {} with `{param}`", other.as_str()));
                    }
                    ClassRule::OneOf(param, values, other) => class.push_str(&format!(
                        "; {} for `{param}` {}",
                        other.as_str(),
                        values.join("/")
                    )),
                }
            }
            if let Some(settles) = e.settles {
                class.push_str(&format!("; immutable: {}", settles.why));
            }
            if e.until_open_when.is_some() {
                class.push_str("; `fqt=pre` (or `fqt` absent) expires at the open");
            }
            match e.venue {
                Some(VenueRule::OfCode(_)) => class.push_str(
                    "; HK codes on Hong Kong's sessions, US secids on New York's (and New York's date)",
                ),
                Some(VenueRule::HongKongFor(param, values)) => class.push_str(&format!(
                    "; Hong Kong's sessions for `{param}` {}",
                    values.join("/")
                )),
                None => {}
            }
            if let Some(successor) = e.successor {
                class.push_str(&format!("; answered as `{}`", successor.path));
            }
            if e.patience == Patience::Long {
                class.push_str("; long timeout");
            }
            out.push_str(&format!(
                "| `{}` | {params} | {class} | {} | {} |\n",
                e.path, e.why, e.summary
            ));
        }
        for (path, reason) in REFUSED {
            out.push_str(&format!(
                "| `POST {path}` | a JSON body | refused: `501 not_implemented` | {reason} | nothing (a side effect upstream) |\n"
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests;
