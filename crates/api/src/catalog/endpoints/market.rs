//! The catalogue's rows for `/market`, in the docs' order.

use super::*;

pub(super) static MARKET: &[Def] = &[
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
