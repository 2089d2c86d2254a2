#!/usr/bin/env python3
"""The table of docs/BENCHMARKS.md "Issue 44 in one run" from what
scripts/bench-all.sh left in its directory: each measure, before (where a before
build ran), now, the anchor of the same run, and the goal. Ratios by round.
Steps that did not run are left out. The commit, the before build, the machine
and the times come first (run.txt, which bench-all.sh writes).

    python3 scripts/bench-all.py target/bench-all
"""

import json
import os
import re
import sys


def load(d, name):
    path = os.path.join(d, name)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return f.read() if name.endswith(".txt") else json.load(f)


def by_round(a, b):
    """Each round's a / b, as "x / y / z"."""
    return " / ".join(f"{x['rps'] / y['rps']:.2f}" for x, y in zip(a, b) if x["rps"] and y["rps"])


def cpu(runs):
    """CPU a request (µs, user + system) over rounds, as "lo–hi"."""
    xs = [r["server_cpu_us"]["user"] + r["server_cpu_us"]["system"] for r in runs if "server_cpu_us" in r]
    return f"{min(xs):.0f}–{max(xs):.0f} µs" if xs else "–"


def hit_rows(load_json, costs, costs_before):
    rows = []
    if costs:
        now, before = instructions(costs), instructions(costs_before or "")
        for answer, n in now.items():
            b = before.get(answer)
            rows.append((f"hit, {answer}, instructions", f"{b:,}" if b else "–",
                         f"{n:,}" + (f" ({n / b:.3f})" if b else ""), "–", "within 5 % of before"))
    for r in (load_json or {}).get("rows", []):
        runs = r["runs"]
        vs_before = by_round(runs["mdproxy"], runs["before"]) if "before" in runs else "–"
        rows.append((f"hit, {r['answer']}, wrk req/s", "md/before " + vs_before,
                     f"{r['rps_median']['mdproxy'] / 1000:.1f}k",
                     "md/nginx " + by_round(runs["mdproxy"], runs.get("nginx", [])), "–"))
    for h in (load_json or {}).get("h2", []):
        rows.append((f"hit over HTTP/2, {h['answer']}", "–", f"{h['mdproxy']['rps_median'] / 1000:.1f}k",
                     f"bare hyper × {h.get('mdproxy/bare', 0):.2f}", "–"))
    return rows


def instructions(text):
    """{answer: instructions a hit} from hit-cost's table (mdproxy's column)."""
    return {m.group(1): int(m.group(2))
            for m in table_lines(text, r"(detail|watchlist|watchlist-gz|week-gz|week|day)\s+(\d+)")}


def table_lines(text, pattern):
    """The matches of `pattern` at the start of `text`'s lines."""
    return filter(None, (re.match(pattern, line) for line in text.splitlines()))


def miss_cost_rows(costs, costs_before):
    """Instructions a miss, each kind: before, now, nginx's in the same run."""
    rows = []
    now, before = miss_instructions(costs or ""), miss_instructions(costs_before or "")
    for kind, (n, nginx) in now.items():
        b = before.get(kind, (None, None))[0]
        rows.append((f"miss, {kind}, instructions", f"{b:,}" if b else "–",
                     f"{n:,}" + (f" ({n / b:.3f})" if b else ""),
                     f"nginx {nginx:,}, md/nginx {n / nginx:.2f}" if nginx else "–", "count, then cut"))
    return rows


def miss_instructions(text):
    """{kind: (mdproxy's instructions a miss, nginx's or None)} from miss-cost's table."""
    kinds = r"(news-search-gz|news-search|cpi-page|unlisted-code)\s+(\d+)(?:\s+(\d+)\s+\d+\.\d+)?"
    return {m.group(1): (int(m.group(2)), int(m.group(3)) if m.group(3) else None)
            for m in table_lines(text, kinds)}


def miss_rows(load_json, kept, relay):
    rows = []
    for kind, servers in (load_json or {}).get("miss", {}).items():
        md = servers["mdproxy"]["runs"]
        vs_before = by_round(md, servers["before"]["runs"]) if "before" in servers else "–"
        anchors = [f"md/Varnish {by_round(md, servers['varnish']['runs'])}"] if "varnish" in servers else []
        anchors += relay_anchor(md, servers)
        rows.append((f"miss, {kind}", "md/before " + vs_before,
                     f"md/nginx {by_round(md, servers['nginx']['runs'])}; mdproxy {cpu(md)}",
                     "; ".join(anchors + [f"nginx {cpu(servers['nginx']['runs'])}"]), "≥ nginx"))
    for name, j in (("nginx relays the 404", relay), ("nginx keeps the 404 30 s", kept)):
        if j:
            s = j["miss"]["unlisted-code"]
            md = s["mdproxy"]["runs"]
            rows.append((f"miss, unlisted code, {name}",
                         "md/before " + by_round(md, s["before"]["runs"]) if "before" in s else "–",
                         f"md/nginx {by_round(md, s['nginx']['runs'])}; mdproxy {cpu(md)}",
                         "; ".join([f"nginx {cpu(s['nginx']['runs'])}"] + relay_anchor(md, s)), "≥ nginx"))
    return rows


def relay_anchor(md, servers):
    """md/bare relay by round (examples/bare_relay: the stack's floor), where it ran."""
    if "relay" not in servers:
        return []
    return [f"md/bare relay {by_round(md, servers['relay']['runs'])} ({cpu(servers['relay']['runs'])})"]


def disk_rows(now, before):
    rows = []
    for name, j in (("now", now), ("before", before)):
        if not j:
            continue
        runs = j["runs"]
        md, ng = runs["mdproxy disk"], runs["nginx sendfile"]
        rows.append((f"disk hit ({name}), mdproxy disk / nginx sendfile", "–", by_round(md, ng),
                     f"CPU a hit: mdproxy {min(r['cpu_us'] for r in md):.0f}–{max(r['cpu_us'] for r in md):.0f} µs, "
                     f"nginx {min(r['cpu_us'] for r in ng):.0f}–{max(r['cpu_us'] for r in ng):.0f} µs", "≥ nginx"))
    return rows


def waiter_rows(text):
    if not text:
        return []
    found = dict(re.findall(r"^\s*(mdproxy|floor[^:]*|nginx|varnish): waiter latency - \d+ ms: .*?p99 ([+\-\d.]+ ms)",
                            text, re.M))
    anchors = ", ".join(f"{k.split(' ')[0]} {v}" for k, v in found.items() if k != "mdproxy")
    return [("200 waiters, p99 past the origin", "–", found.get("mdproxy", "–"), anchors, "≤ +10 ms")]


def fanout_rows(d):
    rows = []
    for name in sorted(os.listdir(d)):
        if not (name.startswith("fanout") and name.endswith(".json")):
            continue
        results = load(d, name)
        md = [r for r in results if r["server"] == "mdproxy"]
        nchan = [r for r in results if r["server"] == "nchan"]
        for r in md:
            how = "HTTP/2" if r.get("h2_streams_per_connection") else "HTTP/1.1"
            if r.get("nodes", 1) > 1:
                how += f", {r['nodes']} nodes"
            anchor = "; ".join(f"nchan p99 {x['spread_ms']['p99']} ms, {x['kib_per_subscriber_rss']} KiB" for x in nchan)
            # SERVER_BUSY=1 (the HTTP/2 runs): the server's own part of the spread.
            part = r.get("server_part_ms")
            part = f" (the server's part p99 {part['p99']} ms)" if part else ""
            rows.append((f"quote stream, {r['n']:,} {how} ({name})", "–",
                         f"p50 {r['spread_ms']['p50']} ms, p99 {r['spread_ms']['p99']} ms{part}, "
                         f"{r['kib_per_subscriber_rss']} KiB a subscriber", anchor or "–",
                         "p99 < 100 ms" if r["n"] <= 10000 else "measured"))
    return rows


def main():
    d = sys.argv[1] if len(sys.argv) > 1 else "target/bench-all"
    rows = (hit_rows(load(d, "load.json"), load(d, "hit-cost.txt"), load(d, "hit-cost-before.txt"))
            + miss_cost_rows(load(d, "miss-cost.txt"), load(d, "miss-cost-before.txt"))
            + miss_rows(load(d, "load.json"), load(d, "404-kept.json"), load(d, "404-relay.json"))
            + disk_rows(load(d, "disk.json"), load(d, "disk-before.json"))
            + waiter_rows(load(d, "waiters.txt"))
            + fanout_rows(d))
    run = load(d, "run.txt")
    if run:
        print(run.strip() + "\n")
    print("| measure | before | now | anchor, same run | goal |")
    print("|---|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    print(f"\nraw figures and logs: {d}")


if __name__ == "__main__":
    main()
