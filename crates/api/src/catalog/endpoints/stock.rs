//! The catalogue's rows for `/stock`, in the docs' order: basic information,
//! market data, financial data, lists, shareholders, earnings and the rest.

use super::*;

pub(super) static STOCK: &[Def] = &[
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
