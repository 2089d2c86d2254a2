//! The catalogue's rows for `/fund` (ETFs), in the docs' order.

use super::*;

pub(super) static FUND: &[Def] = &[
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
];
