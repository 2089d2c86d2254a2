//! What each parameter of the catalogue means, in English, by name: the words an
//! agent reads in a tool's input schema, beside the Chinese ones the upstream's
//! docs give (a test checks that every parameter a tool takes has its words).

/// A parameter's name and what it means.
const WORDS: &[(&str, &str)] = &[
    (
        "category",
        "A category, by its Chinese name (several joined by `;`).",
    ),
    (
        "code",
        "A code as people type it: 600519, 600519.SH or sh600519 (a fund's for the fund tools).",
    ),
    ("codes", "Codes, comma-separated, as people type them."),
    (
        "cursor",
        "The cursor of the next page, from the previous answer; none for the first page.",
    ),
    ("dedupe", "Whether to drop repeated items."),
    (
        "dimension",
        "What to group by: region, industry or concept.",
    ),
    ("startDate", "The first date, YYYY-MM-DD."),
    ("endDate", "The last date, YYYY-MM-DD."),
    ("eventKinds", "The kinds of events, comma-separated."),
    ("exchange", "The exchange: auto, sse, szse, bse or all."),
    ("filter", "A filter expression; none for everything."),
    ("forecastPageSize", "Forecast rows per page."),
    (
        "fqt",
        "Price adjustment: pre (forward), after (backward) or none.",
    ),
    ("from", "The first date, YYYY-MM-DD."),
    ("to", "The last date, YYYY-MM-DD."),
    ("governanceLimit", "The most governance events to return."),
    ("holdNumChange", "The kind of change in holdings."),
    ("industryName", "An industry, by its Chinese name."),
    ("interval", "The interval between points."),
    ("item", "The item to read."),
    (
        "keyword",
        "Words to search for (a code or a name for stocks).",
    ),
    (
        "lastTime",
        "The cursor of the next page: a Unix time in seconds from the previous answer.",
    ),
    ("limit", "The most items to return."),
    ("market", "The market (cn_a: every A-share)."),
    ("page", "The page number."),
    ("pageIndex", "The page number."),
    ("pageSize", "Items per page."),
    (
        "period",
        "The length of a bar: day, week, month, or minutes.",
    ),
    ("pz", "The most quotes per event."),
    (
        "quotedata_hash",
        "The hash of the previous answer: only what changed since comes back.",
    ),
    (
        "reportDate",
        "The report period, YYYY-MM-DD (a year's end for annual figures).",
    ),
    ("reportType", "The kind of report or statement."),
    ("sortColumn", "The column to sort by."),
    ("source", "Where to read from."),
    ("stockCode", "A stock's code."),
    ("stockName", "A stock's name."),
    ("subjectId", "A subject's numeric ID."),
    (
        "subjectKey",
        "A subject's key (morning_brief, news_broadcast, ...), instead of subjectId.",
    ),
    ("themeId", "A theme's ID (as the theme library lists it)."),
    ("timeRange", "How far back: 3m, 6m, 1y, 3y or 5y."),
    ("topN", "How many of the top to return."),
    ("type", "The kind to read."),
    ("year", "A year."),
    ("years", "How many years."),
];

/// What parameter `name` means, if it is known.
pub fn english(name: &str) -> Option<&'static str> {
    WORDS.iter().find(|(n, _)| *n == name).map(|(_, w)| *w)
}
