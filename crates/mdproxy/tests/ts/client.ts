// A dashboard's client of three endpoints (a stock's quote, the market indices, the
// trading calendar), typed by what openapi-typescript generates from `mdproxy openapi`.
// scripts/ts-client generates ./mdproxy.ts beside it and type-checks it (crates/mdproxy/tests/it/openapi.rs
// runs that in CI); it is never run. A field the document does not have fails the check.
import type { components, paths } from "./mdproxy";

/** The paths with a GET operation (the refused `POST /stock/report/download` has none). */
type GetPath = {
    [K in keyof paths]: paths[K]["get"] extends { parameters: unknown } ? K : never;
}[keyof paths];
type Get<P extends GetPath> = Extract<paths[P]["get"], { parameters: unknown }>;
/** The JSON body of a 200: the typed success, or the upstream's own failure. */
type Answer<P extends GetPath> = Get<P> extends {
    responses: { 200: { content: { "application/json": infer B } } };
}
    ? B
    : never;
type Params = { path?: Record<string, string>; query?: Record<string, string | number> };

/** The target of `template` with its parameters filled in. */
function target(template: string, params: Params): string {
    let path = template;
    for (const [name, value] of Object.entries(params.path ?? {})) {
        path = path.replace(`{${name}}`, encodeURIComponent(value));
    }
    const query = new URLSearchParams();
    for (const [name, value] of Object.entries(params.query ?? {})) {
        query.set(name, String(value));
    }
    const q = query.toString();
    return q === "" ? path : `${path}?${q}`;
}

/** GETs an operation of the proxy at `base` (`http://host:port/api/v1`). */
async function get<P extends GetPath>(
    base: string,
    token: string,
    template: P,
    params: Get<P>["parameters"],
): Promise<Answer<P>> {
    const response = await fetch(base + target(template, params as Params), {
        headers: { Authorization: `Bearer ${token}` },
    });
    if (response.status !== 200) {
        const error: components["schemas"]["Error"] = await response.json();
        throw new Error(`${error.error.code}: ${error.message}`);
    }
    return (await response.json()) as Answer<P>;
}

/** Quote prices of the push2 lists are integers, the price times 100. */
function price(x100: number | null | undefined): string {
    return x100 == null ? "-" : (x100 / 100).toFixed(2);
}

/** The dashboard's lines: one stock, the indices, the next trading days. */
export async function dashboard(base: string, token: string): Promise<string[]> {
    const lines: string[] = [];

    const detail = await get(base, token, "/stock/detail/{code}", { path: { code: "600519" } });
    if (detail.success) {
        const quote: components["schemas"]["StockDetailByCodeData"] = detail.data;
        lines.push(`${quote?.name ?? "?"} ${price(quote?.newPrice)} (${price(quote?.changeRate)}%)`);
    } else {
        lines.push(`detail: ${detail.message ?? "failed"}`);
    }

    const indices = await get(base, token, "/market/indices", {});
    if (indices.success) {
        for (const index of indices.data?.diff ?? []) {
            lines.push(`${index.name ?? index.code ?? "?"} ${price(index.newPrice)}`);
        }
    }

    const calendar = await get(base, token, "/market/trading-calendar", {
        query: { market: "CN_A", from: "2026-05-01", to: "2026-05-15" },
    });
    if (calendar.success) {
        const open = (calendar.data ?? []).filter((day) => day.isTradingDay === true);
        lines.push(`trading days: ${open.map((day) => day.date ?? "?").join(", ")}`);
    }
    return lines;
}
