//! The MCP tools an agent calls, as data: the upstream MCP server's 28 tool names
//! (`docs/UPSTREAM-MCP.md`), each mapped to one or more catalogue endpoints;
//! their input schemas generated from the catalogue; an argument object turned into
//! the REST target it stands for, which the contract's own validation then keys.
//!
//! A tool over several endpoints takes one more argument that picks the endpoint
//! (`view`, or `indicator` for macro data), the first its default. The upstream
//! documents only the names: the mapping, the argument names and this selector are
//! ours (docs/mcp.md shows the table).

use serde_json::{Map, Value};

use crate::catalog::{Endpoint, Param, catalog, param_name};

mod schema;

/// One tool: its name, group and description, the argument that picks its
/// endpoint, and the endpoints by the value of that argument.
#[derive(Debug)]
pub struct Tool {
    pub name: &'static str,
    pub group: &'static str,
    pub description: &'static str,
    /// The argument that picks the endpoint (when there are several).
    pub select: &'static str,
    /// The endpoints by the selector's value, the first the default.
    pub views: &'static [(&'static str, &'static str)],
}

/// One view's use of an argument.
struct Use {
    view: &'static str,
    /// The view's endpoint (its catalogue template).
    path: &'static str,
    param: &'static Param,
    /// Required by that view (a path parameter always is).
    required: bool,
}

/// Why a tool's arguments name no request: each names the argument and what it
/// takes.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum ArgumentError {
    #[error("unknown argument {name}: {tool} takes {allowed}")]
    Unknown {
        tool: &'static str,
        name: String,
        allowed: String,
    },
    #[error("{select} must be one of {allowed} (got {got})")]
    View {
        select: &'static str,
        allowed: String,
        got: String,
    },
    #[error("{name} is required{view}")]
    Missing { name: &'static str, view: String },
    #[error("{name} must be a string, a number, true or false, or a list of strings")]
    Type { name: String },
}

const VIEW: &str = "view";

/// The macro indicators, each a paged table and a chart series.
const MACRO: &[(&str, &str)] = &[
    ("cpi", "/macro/cpi"),
    ("ppi", "/macro/ppi"),
    ("gdp", "/macro/gdp"),
    ("pmi", "/macro/pmi"),
    ("lpr", "/macro/lpr"),
    ("currency-supply", "/macro/currency-supply"),
    ("new-loans", "/macro/new-loans"),
    ("total-retail", "/macro/total-retail"),
    ("customs-trade", "/macro/customs-trade"),
    ("fixed-asset-investment", "/macro/fixed-asset-investment"),
    ("gold-currency", "/macro/gold-currency"),
];

const MACRO_SERIES: &[(&str, &str)] = &[
    ("cpi", "/macro/cpi/series"),
    ("ppi", "/macro/ppi/series"),
    ("gdp", "/macro/gdp/series"),
    ("pmi", "/macro/pmi/series"),
    ("lpr", "/macro/lpr/series"),
    ("currency-supply", "/macro/currency-supply/series"),
    ("new-loans", "/macro/new-loans/series"),
    ("total-retail", "/macro/total-retail/series"),
    ("customs-trade", "/macro/customs-trade/series"),
    (
        "fixed-asset-investment",
        "/macro/fixed-asset-investment/series",
    ),
    ("gold-currency", "/macro/gold-currency/series"),
];

const fn one(
    name: &'static str,
    group: &'static str,
    description: &'static str,
    views: &'static [(&'static str, &'static str)],
) -> Tool {
    Tool {
        name,
        group,
        description,
        select: VIEW,
        views,
    }
}

/// The upstream's 28 tools, in its documentation's order.
pub static TOOLS: &[Tool] = &[
    one(
        "search_stocks",
        "stocks",
        "Find A-share stocks whose code or name matches a keyword (股票搜索).",
        &[("search", "/stock/search")],
    ),
    one(
        "get_stock_quote",
        "stocks",
        "The real-time quote of one stock: price, change, volume, turnover (实时行情).",
        &[("quote", "/stock/indicator/realtime/{code}")],
    ),
    one(
        "get_stock_kline",
        "stocks",
        "Daily, weekly, monthly or minute K-line bars of one stock, with the chosen adjustment (K线).",
        &[("kline", "/stock/kline")],
    ),
    one(
        "get_stock_financial",
        "stocks",
        "Financial data of one stock: indicators, a year's snapshot, the three statements, history, common-size ratios, DuPont, historical PE (财务).",
        &[
            ("indicators", "/stock/indicator/financial/{code}"),
            ("snapshot", "/stock/financial/snapshot/{code}"),
            ("statements", "/stock/financial/statements/{code}"),
            ("history", "/stock/financial/history/{code}"),
            ("ratio", "/stock/financial/ratio/{code}"),
            ("dupont", "/stock/financial/dupont/{code}"),
            ("historical-pe", "/stock/valuation/historical-pe"),
        ],
    ),
    one(
        "get_stock_diagnosis",
        "stocks",
        "Diagnosis of one stock: the comprehensive score, financial health and risk, the financial portrait, the news side (诊股).",
        &[
            ("comprehensive", "/stock/diagnosis/comprehensive/{code}"),
            (
                "financial-evaluation",
                "/stock/diagnosis/financial/evaluation/{code}",
            ),
            (
                "financial-portrait",
                "/stock/diagnosis/financial/portrait/{code}",
            ),
            ("message", "/stock/diagnosis/message/{code}"),
        ],
    ),
    one(
        "get_stock_shareholders",
        "stocks",
        "Shareholders: a stock's top ten circulating shareholders at a report date, that date's latest value, or the stocks one shareholder holds (股东).",
        &[
            ("top-ten", "/stock/shareholder/research/{code}"),
            ("latest-date", "/stock/shareholder/research/latest/{code}"),
            ("holdings", "/stock/shareholder/list"),
        ],
    ),
    one(
        "get_stock_info",
        "stocks",
        "Facts about one stock: its details, several stocks at once, boards, main business, industry, core themes, operations, peers, news, corporate actions, governance and regulatory events, announcements, industry cycle (个股信息).",
        &[
            ("detail", "/stock/detail/{code}"),
            ("batch", "/stock/list"),
            ("boards", "/stock/board/info/{code}"),
            ("business", "/stock/business/main/{code}"),
            ("industry", "/stock/industry/info/{code}"),
            ("themes", "/stock/theme/core/{code}"),
            ("operations", "/stock/company/operations/{code}"),
            (
                "operations-insight",
                "/stock/topic/operations-insight/{code}",
            ),
            ("peers", "/stock/peers/{code}"),
            ("news", "/stock/news"),
            ("corporate-actions", "/stock/corporate-actions"),
            ("governance", "/stock/governance/events/{code}"),
            ("regulatory", "/stock/regulatory/events"),
            ("reports", "/stock/report/search"),
            ("industry-cycle", "/stock/industry/cycle/{code}"),
        ],
    ),
    one(
        "get_stock_earnings_forecast",
        "stocks",
        "Earnings forecasts published for a report period, paged; give reportDate (the upstream refuses a request without one) (业绩预告).",
        &[("list", "/stock/earnings-forecast")],
    ),
    one(
        "get_stock_performance_ten_years",
        "stocks",
        "Ten-year performance of an industry's stocks in a year, or the latest report date for one stock (十年业绩).",
        &[
            ("by-industry", "/stock/performance/ten-years"),
            ("latest-date", "/stock/performance/ten-years/latest/{code}"),
        ],
    ),
    one(
        "get_industry_list",
        "stocks",
        "The industry classification (行业).",
        &[("list", "/stock/industry/list")],
    ),
    one(
        "get_concept_list",
        "stocks",
        "The concept boards (概念).",
        &[("list", "/stock/concept/list")],
    ),
    one(
        "get_area_list",
        "stocks",
        "The regional classification (地域).",
        &[("list", "/stock/area/list")],
    ),
    one(
        "get_style_list",
        "stocks",
        "The style classification (风格).",
        &[("list", "/stock/style/list")],
    ),
    one(
        "get_market_indices",
        "market",
        "Real-time values of the major stock indices (大盘指数).",
        &[("indices", "/market/indices")],
    ),
    one(
        "get_sector_flow_summary",
        "market",
        "Capital flow into sectors by region, industry or concept, summed (板块资金流).",
        &[("summary", "/market/sector-flow/summary")],
    ),
    one(
        "get_sector_flow_list",
        "market",
        "Capital flow into sectors by dimension, paged (板块资金流列表).",
        &[("list", "/market/sector-flow/list")],
    ),
    one(
        "get_stocks_realtime_list",
        "market",
        "Real-time quotes of a whole market or board (cn_a, bj, cyb, kcb, hk...), paged (实时行情列表).",
        &[("list", "/market/stocks/realtime-list")],
    ),
    one(
        "get_market_overview",
        "market",
        "The market as a whole: the capital side, the heat map, global indices, the overview (资金面/热力图/全球指数).",
        &[
            ("funds", "/market/fund-analysis"),
            ("heatmap", "/market/hotmap"),
            ("global-indices", "/market/global-index"),
            ("overview", "/news/overview"),
        ],
    ),
    one(
        "get_news_summary",
        "news",
        "Headline summaries and selected news, paged, filtered by keyword (要闻).",
        &[("headlines", "/news/headlines")],
    ),
    one(
        "get_news_feed",
        "news",
        "The flash-news stream, newest first; pass the cursor of a page for the next (快讯).",
        &[("feed", "/news/feed")],
    ),
    one(
        "get_news_topics",
        "news",
        "Themes: the market's main lines, the theme library, one theme's detail or its stocks (主线/题材).",
        &[
            ("mainline", "/news/mainline"),
            ("library", "/news/topic/library/list"),
            ("detail", "/news/topic/library/detail/{themeId}"),
            ("stocks", "/news/topic/library/stocks/{themeId}"),
        ],
    ),
    one(
        "search_news",
        "news",
        "Keyword search over news summaries, paged (新闻搜索).",
        &[("search", "/news/search")],
    ),
    one(
        "get_news_topic_subject",
        "news",
        "A subject's news stream, such as the morning brief (专题).",
        &[("subject", "/news/topic-subject")],
    ),
    Tool {
        name: "get_macro_data",
        group: "macro",
        description: "A Chinese macro indicator as a paged table: CPI, PPI, GDP, PMI, LPR, money supply, new loans, retail sales, customs trade, fixed-asset investment, reserves (宏观数据).",
        select: "indicator",
        views: MACRO,
    },
    Tool {
        name: "get_macro_series",
        group: "macro",
        description: "A Chinese macro indicator as a chart series (宏观序列).",
        select: "indicator",
        views: MACRO_SERIES,
    },
    one(
        "search_funds",
        "funds",
        "ETFs and funds: the full ETF list, or the fund screen with a filter (基金筛选).",
        &[
            ("etf-list", "/fund/all-etf-list"),
            ("selection", "/fund/selection"),
        ],
    ),
    one(
        "get_fund_detail",
        "funds",
        "One fund: its details, asset and industry allocation, tracked index, holdings, transactions, valuation (基金详情).",
        &[
            ("detail", "/fund/detail/{code}"),
            ("asset-allocation", "/fund/asset-allocation/{code}"),
            ("industry-allocation", "/fund/industry-allocation/{code}"),
            ("following-index", "/fund/following-index/{code}"),
            ("holdings", "/fund/holdings/{code}"),
            ("transactions", "/fund/transactions/{code}"),
            ("valuation", "/fund/valuation-analysis/{code}"),
        ],
    ),
    one(
        "get_fund_kline",
        "funds",
        "K-line bars of an ETF (基金K线).",
        &[("kline", "/fund/kline")],
    ),
];

/// The tools as a Markdown table (docs/mcp.md holds it, a test keeps it so): each
/// tool, its selector's values and the endpoint each reads.
pub fn markdown_table() -> String {
    let mut out = String::from("| Tool | Group | Reads |\n|---|---|---|\n");
    for tool in TOOLS {
        let reads: Vec<String> = if tool.views.len() == 1 {
            vec![format!("`{}`", tool.views[0].1)]
        } else {
            tool.views
                .iter()
                .map(|(view, path)| format!("`{}={view}`: `{path}`", tool.select))
                .collect()
        };
        out.push_str(&format!(
            "| `{}` | {} | {} |\n",
            tool.name,
            tool.group,
            reads.join("<br>")
        ));
    }
    out
}

/// The root of the catalogue's resources: `mdproxy://api/v1/stock/detail/600519`
/// reads what `GET /api/v1/stock/detail/600519` answers.
pub const RESOURCE_ROOT: &str = "mdproxy://api/v1";

/// Every endpoint of the catalogue a client may read (not the stream, not what
/// the proxy refuses) as an RFC 6570 URI template under [`RESOURCE_ROOT`]: its path
/// with its path parameters, its query parameters as a form-style expansion
/// (`mdproxy://api/v1/stock/kline{?code,period,fqt,from,to}`), with the endpoint.
pub fn resource_templates() -> Vec<(String, &'static Endpoint)> {
    catalog()
        .endpoints()
        .iter()
        .filter(|e| !e.streaming)
        .filter(|e| {
            !crate::catalog::REFUSED
                .iter()
                .any(|(path, _)| *path == e.path)
        })
        .map(|e| {
            let query: Vec<&str> = e
                .query
                .iter()
                .filter(|p| p.role == crate::catalog::KeyRole::Key)
                .map(|p| p.name)
                .collect();
            let expansion = if query.is_empty() {
                String::new()
            } else {
                format!("{{?{}}}", query.join(","))
            };
            (format!("{RESOURCE_ROOT}{}{expansion}", e.path), e)
        })
        .collect()
}

/// The REST target (relative to `/api/v1`) a resource URI names, if it is one of
/// ours.
pub fn resource_target(uri: &str) -> Option<&str> {
    uri.strip_prefix(RESOURCE_ROOT)
        .filter(|t| t.starts_with('/'))
}

/// The tool named `name`.
pub fn find(name: &str) -> Option<&'static Tool> {
    TOOLS.iter().find(|t| t.name == name)
}

impl Tool {
    /// Its endpoints with their selector values, in order.
    ///
    /// # Panics
    /// When a path names no endpoint of the catalogue (a test holds that none does).
    pub fn endpoints(&self) -> impl Iterator<Item = (&'static str, &'static Endpoint)> + '_ {
        self.views.iter().map(|(view, path)| {
            let endpoint = catalog()
                .by_path(path)
                .unwrap_or_else(|| panic!("{}: {path} is no endpoint", self.name));
            (*view, endpoint)
        })
    }

    /// Arguments its default view answers: the catalogue's example target of that
    /// endpoint as arguments (tests and benches use them).
    pub fn sample_arguments(&self) -> Map<String, Value> {
        let (_, endpoint) = self.endpoints().next().expect("every tool has a view");
        let target = endpoint.example_target();
        let mut out = Map::new();
        let (path, query) = target.split_once('?').unwrap_or((&target, ""));
        let given = endpoint.path.split('/').zip(path.split('/'));
        for (template, value) in given {
            if let Some(name) = param_name(template) {
                out.insert(name.to_owned(), value.into());
            }
        }
        for (name, value) in form_urlencoded::parse(query.as_bytes()) {
            out.insert(name.into_owned(), value.into_owned().into());
        }
        out
    }

    fn chooses(&self) -> bool {
        self.views.len() > 1
    }

    /// Every argument it takes: the selector (when it has one), then each
    /// endpoint's parameters, path first, once each.
    fn parameters(&self) -> Vec<(&'static str, Vec<Use>)> {
        let mut out: Vec<(&'static str, Vec<Use>)> = Vec::new();
        for (view, endpoint) in self.endpoints() {
            let path = endpoint.path_params.iter().map(|p| (p, true));
            for (param, in_path) in path.chain(endpoint.query.iter().map(|p| (p, false))) {
                let one = Use {
                    view,
                    path: &endpoint.path,
                    param,
                    required: param.required || in_path,
                };
                match out.iter_mut().find(|(name, _)| *name == param.name) {
                    Some((_, uses)) => uses.push(one),
                    None => out.push((param.name, vec![one])),
                }
            }
        }
        out
    }

    /// The REST target (`/stock/kline?code=600519&period=day`, relative to
    /// `/api/v1`) that `arguments` ask for: the view picked, path parameters put in
    /// the path, the rest in the query as given (the contract's validation then
    /// checks and keys them as it does a REST request's).
    ///
    /// # Errors
    /// An unknown argument, selector value or type, or a missing path parameter,
    /// each naming the argument and what it takes.
    pub fn target(&self, arguments: &Map<String, Value>) -> Result<String, ArgumentError> {
        let (view, endpoint) = self.pick(arguments)?;
        let mut path = String::new();
        let mut used = Vec::new();
        for segment in endpoint.path.split('/').filter(|s| !s.is_empty()) {
            path.push('/');
            match param_name(segment) {
                Some(name) => {
                    let value = arguments
                        .get(name)
                        .filter(|v| !v.is_null())
                        .map(|v| text(name, v))
                        .transpose()?
                        .filter(|v| !v.is_empty())
                        .ok_or_else(|| ArgumentError::Missing {
                            name,
                            view: self.for_view(view),
                        })?;
                    path.extend(percent_encoding::utf8_percent_encode(
                        &value,
                        percent_encoding::NON_ALPHANUMERIC,
                    ));
                    used.push(name);
                }
                None => path.push_str(segment),
            }
        }
        let mut query = form_urlencoded::Serializer::new(String::new());
        // An argument given as null is absent (agents send them for optional ones).
        for (name, value) in arguments.iter().filter(|(_, v)| !v.is_null()) {
            if name == self.select && self.chooses() || used.contains(&name.as_str()) {
                continue;
            }
            if endpoint.query_param(name).is_none() {
                return Err(self.unknown(name, view));
            }
            query.append_pair(name, &text(name, value)?);
        }
        let query = query.finish();
        Ok(if query.is_empty() {
            path
        } else {
            format!("{path}?{query}")
        })
    }

    /// The view `arguments` pick, and its endpoint.
    fn pick(
        &self,
        arguments: &Map<String, Value>,
    ) -> Result<(&'static str, &'static Endpoint), ArgumentError> {
        let chosen = match arguments.get(self.select).filter(|v| !v.is_null()) {
            Some(value) if self.chooses() => text(self.select, value)?,
            _ => self.views[0].0.to_owned(),
        };
        self.endpoints()
            .find(|(view, _)| *view == chosen)
            .ok_or_else(|| ArgumentError::View {
                select: self.select,
                allowed: self
                    .views
                    .iter()
                    .map(|(v, _)| *v)
                    .collect::<Vec<_>>()
                    .join(", "),
                got: chosen,
            })
    }

    fn for_view(&self, view: &str) -> String {
        if self.chooses() {
            format!(" by {} {view}", self.select)
        } else {
            String::new()
        }
    }

    fn unknown(&self, name: &str, view: &str) -> ArgumentError {
        let (_, endpoint) = self
            .endpoints()
            .find(|(v, _)| *v == view)
            .expect("the view was picked from these");
        let mut allowed: Vec<&str> = endpoint
            .path_params
            .iter()
            .chain(endpoint.query)
            .map(|p| p.name)
            .collect();
        if self.chooses() {
            allowed.insert(0, self.select);
        }
        ArgumentError::Unknown {
            tool: self.name,
            name: name.to_owned(),
            allowed: if allowed.is_empty() {
                "no arguments".to_owned()
            } else {
                format!("{}{}", allowed.join(", "), self.for_view(view))
            },
        }
    }
}

/// An argument's value as the query or path writes it: strings as they are,
/// numbers and booleans as JSON writes them, a list of strings comma-separated.
fn text(name: &str, value: &Value) -> Result<String, ArgumentError> {
    match value {
        Value::String(s) => Ok(s.clone()),
        Value::Number(n) => Ok(n.to_string()),
        Value::Bool(b) => Ok(b.to_string()),
        Value::Array(items) => items
            .iter()
            .map(|item| match item {
                Value::String(s) => Ok(s.clone()),
                Value::Number(n) => Ok(n.to_string()),
                _ => Err(ArgumentError::Type {
                    name: name.to_owned(),
                }),
            })
            .collect::<Result<Vec<_>, _>>()
            .map(|items| items.join(",")),
        _ => Err(ArgumentError::Type {
            name: name.to_owned(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn args(value: Value) -> Map<String, Value> {
        value.as_object().cloned().unwrap()
    }

    /// 28 tools, the upstream's names, each over endpoints the catalogue has; no
    /// endpoint but the stream and the report download is out of every tool.
    #[test]
    fn the_upstreams_28_tools_over_the_catalogue() {
        assert_eq!(TOOLS.len(), 28);
        let mut names: Vec<&str> = TOOLS.iter().map(|t| t.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), 28);
        for tool in TOOLS {
            assert_eq!(tool.endpoints().count(), tool.views.len(), "{}", tool.name);
            assert!(tool.endpoints().all(|(_, e)| !e.streaming), "{}", tool.name);
        }
    }

    /// Arguments become the REST target: the path filled, the view dropped, the
    /// rest in the query; the contract's validation then keys it as REST does.
    #[test]
    fn arguments_become_the_rest_target() {
        let kline = find("get_stock_kline").unwrap();
        let target = kline
            .target(&args(
                json!({"code": "600519", "period": "week", "fqt": "none", "from": null}),
            ))
            .unwrap();
        assert!(target.starts_with("/stock/kline?"), "{target}");
        let rest = crate::parse_target("/stock/kline?code=600519.SH&fqt=none&period=week").unwrap();
        assert_eq!(crate::parse_target(&target).unwrap().target, rest.target);
        let financial = find("get_stock_financial").unwrap();
        assert_eq!(
            financial
                .target(&args(
                    json!({"view": "dupont", "code": "600519", "years": 5})
                ))
                .unwrap(),
            "/stock/financial/dupont/600519?years=5"
        );
        let macro_data = find("get_macro_series").unwrap();
        assert_eq!(
            macro_data
                .target(&args(json!({"indicator": "cpi"})))
                .unwrap(),
            "/macro/cpi/series"
        );
        let batch = find("get_stock_info").unwrap();
        assert_eq!(
            batch
                .target(&args(
                    json!({"view": "batch", "codes": ["600519", "000001"]})
                ))
                .unwrap(),
            "/stock/list?codes=600519%2C000001"
        );
    }

    /// A wrong argument is named with what the tool takes.
    #[test]
    fn a_wrong_argument_is_named_with_what_is_allowed() {
        let financial = find("get_stock_financial").unwrap();
        let said = financial
            .target(&args(json!({"view": "cashflow", "code": "600519"})))
            .unwrap_err()
            .to_string();
        assert!(
            said.starts_with("view must be one of indicators, snapshot"),
            "{said}"
        );
        let said = financial
            .target(&args(json!({"view": "dupont"})))
            .unwrap_err()
            .to_string();
        assert_eq!(said, "code is required by view dupont");
        let said = find("get_market_indices")
            .unwrap()
            .target(&args(json!({"code": "1"})))
            .unwrap_err()
            .to_string();
        assert_eq!(
            said,
            "unknown argument code: get_market_indices takes no arguments"
        );
        let said = find("get_stock_kline")
            .unwrap()
            .target(&args(json!({"code": "600519", "perod": "day"})))
            .unwrap_err()
            .to_string();
        assert!(
            said.contains("unknown argument perod") && said.contains("period"),
            "{said}"
        );
    }

    /// Every readable endpoint is a resource template; a resource URI is the REST
    /// target under its root.
    #[test]
    fn the_catalogue_as_resource_templates() {
        let templates = resource_templates();
        assert!(templates.len() > 80, "{}", templates.len());
        assert!(
            templates
                .iter()
                .any(|(t, _)| t == "mdproxy://api/v1/stock/detail/{code}")
        );
        assert!(templates.iter().all(|(_, e)| !e.streaming));
        let kline = templates
            .iter()
            .find(|(_, e)| e.path == "/stock/kline")
            .unwrap();
        assert!(
            kline.0.starts_with("mdproxy://api/v1/stock/kline{?code,"),
            "{}",
            kline.0
        );
        assert_eq!(
            resource_target("mdproxy://api/v1/stock/kline?code=600519"),
            Some("/stock/kline?code=600519")
        );
        assert_eq!(resource_target("file:///etc/passwd"), None);
        assert_eq!(resource_target("mdproxy://api/v1"), None);
    }

    /// The input schema comes from the catalogue: the selector's enum, the
    /// parameters' kinds and defaults, what every view requires.
    #[test]
    fn input_schemas_come_from_the_catalogue() {
        let kline = find("get_stock_kline").unwrap().input_schema();
        assert_eq!(kline["required"], json!(["code"]));
        assert_eq!(kline["properties"]["period"]["default"], "day");
        assert!(
            kline["properties"]["period"]["enum"]
                .as_array()
                .unwrap()
                .len()
                >= 3
        );
        let financial = find("get_stock_financial").unwrap().input_schema();
        assert_eq!(financial["properties"]["view"]["default"], "indicators");
        // Every view takes the code (historical-pe in its query).
        assert_eq!(financial["required"], json!(["code"]));
        for tool in TOOLS {
            let schema = tool.input_schema();
            assert_eq!(schema["type"], "object", "{}", tool.name);
        }
    }

    /// Every argument of every tool says what it means in English, and in the
    /// Chinese words of the upstream's docs where they give some.
    #[test]
    fn every_argument_is_described_in_english_and_the_docs_chinese() {
        for tool in TOOLS {
            for (name, _) in tool.parameters() {
                assert!(
                    crate::words::english(name).is_some(),
                    "{}'s argument {name} has no English words",
                    tool.name
                );
            }
        }
        let kline = find("get_stock_kline").unwrap().input_schema();
        let fqt = kline["properties"]["fqt"]["description"].as_str().unwrap();
        assert_eq!(
            fqt,
            "Price adjustment: pre (forward), after (backward) or none.（`pre`/`after`/`none`）"
        );
        assert!(
            include_str!("../../../docs/mcp.md").contains(fqt),
            "docs/mcp.md quotes it"
        );
        let holders = find("get_stock_shareholders").unwrap().input_schema();
        let code = holders["properties"]["code"]["description"]
            .as_str()
            .unwrap();
        assert!(code.contains("股东代码"), "each view's own words: {code}");
    }

    /// A result's schema: the data as the views' typed response schemas say,
    /// with when, how and for which request.
    #[test]
    fn output_schemas_come_from_the_response_schemas() {
        for tool in TOOLS {
            let schema = tool.output_schema();
            assert_eq!(schema["type"], "object", "{}", tool.name);
            assert_eq!(
                schema["required"],
                json!(["data", "asOf", "cache", "source"])
            );
        }
        let indices = find("get_market_indices").unwrap().output_schema();
        assert_eq!(
            indices["properties"]["data"],
            crate::shapes::data_schema("/market/indices").unwrap()
        );
        // The docs show no answer of the K-lines: any data.
        let kline = find("get_stock_kline").unwrap().output_schema();
        assert_eq!(kline["properties"]["data"], json!({}));
        // Of several views, any of theirs; any data when a view has none.
        let mut several = 0;
        for tool in TOOLS {
            let data = &tool.output_schema()["properties"]["data"];
            let shapes: Vec<Option<Value>> = tool
                .endpoints()
                .map(|(_, e)| crate::shapes::data_schema(&e.path))
                .collect();
            if shapes.iter().any(Option::is_none) {
                assert_eq!(data, &json!({}), "{}", tool.name);
            } else if let Some(any) = data["anyOf"].as_array() {
                several += 1;
                assert!(
                    shapes.iter().flatten().all(|s| any.contains(s)),
                    "{}",
                    tool.name
                );
            } else {
                assert_eq!(Some(data), shapes[0].as_ref(), "{}", tool.name);
            }
        }
        assert!(several > 0, "some tool reads several documented views");
    }
}
