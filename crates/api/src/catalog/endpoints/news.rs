//! The catalogue's rows for `/news`, in the docs' order.

use super::*;

pub(super) static NEWS: &[Def] = &[
    def(
        "/news/overview",
        News,
        &[],
        "Market overview data",
        "news flows day and night",
    ),
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
];
