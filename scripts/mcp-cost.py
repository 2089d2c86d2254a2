#!/usr/bin/env python3
"""The cost of a cached MCP tool call beside the REST hit for the same key, and the
upstream requests a team of agents is spared (scripts/mcp-cost.sh runs it).
Standard library, wrk and curl; prints one table."""

import argparse
import asyncio
import json
import re
import socket
import statistics
import subprocess
import tempfile
import time
import urllib.request

TOKEN = "mcp-cost-token"
REVISION = "2025-06-18"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait(port):
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"nothing listens on {port}")


def post(url, body, session=None):
    headers = {"content-type": "application/json", "accept": "application/json, text/event-stream",
               "x-api-key": TOKEN, "mcp-protocol-version": REVISION}
    if session:
        headers["mcp-session-id"] = session
    req = urllib.request.Request(url, json.dumps(body).encode(), headers)
    with urllib.request.urlopen(req) as r:
        text = r.read().decode()
        session = r.headers.get("mcp-session-id")
        if r.headers.get("content-type", "").startswith("text/event-stream"):
            # A session's answers come as events: the message is the last data line.
            data = [l[5:].strip() for l in text.splitlines() if l.startswith("data:") and l[5:].strip()]
            text = data[-1] if data else ""
        return session, (json.loads(text) if text else None)


def wrk(url, duration, connections, script=None):
    cmd = ["wrk", "-t2", f"-c{connections}", f"-d{duration}s", "--latency"]
    if script:
        cmd += ["-s", script]
    out = subprocess.run(cmd + [url], capture_output=True, text=True, check=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    p99 = re.search(r"99%\s+([\d.]+)(us|ms|s)", out)
    scale = {"us": 0.001, "ms": 1, "s": 1000}[p99.group(2)]
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if non2xx:
        raise SystemExit(f"wrk saw {non2xx.group(1)} errors at {url}")
    return rps, float(p99.group(1)) * scale


async def agent(url, calls, tools, codes, seed):
    loop = asyncio.get_running_loop()
    session, _ = await loop.run_in_executor(None, post, url, {
        "jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": REVISION, "capabilities": {}, "clientInfo": {"name": "team", "version": "1"}}})
    await loop.run_in_executor(None, post, url, {"jsonrpc": "2.0", "method": "notifications/initialized"}, session)
    for i in range(calls):
        name, args = tools[(seed + i) % len(tools)]
        args = dict(args, code=codes[(seed * 7 + i) % len(codes)]) if "code" in args else args
        await loop.run_in_executor(None, post, url, {
            "jsonrpc": "2.0", "id": i + 1, "method": "tools/call", "params": {"name": name, "arguments": args}}, session)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--duration", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--connections", type=int, default=32)
    ap.add_argument("--agents", type=int, default=20)
    ap.add_argument("--calls", type=int, default=50)
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="mcp-cost-")
    sim_port, port, admin = free_port(), free_port(), free_port()
    procs = [subprocess.Popen([args.bin, "sim", "--listen", f"127.0.0.1:{sim_port}", "--token", "sim-secret",
                               "--log", "warn"], stdout=subprocess.DEVNULL)]
    with open(f"{work}/mdproxy.toml", "w") as f:
        f.write(f"""[server]\nlisten = "127.0.0.1:{port}"\n[auth]\ntokens = ["{TOKEN}"]\n[upstream]
base_url = "http://127.0.0.1:{sim_port}/api/v1"\ntoken = "sim-secret"\n[limits]\nupstream_rps = 0\nclient_rps = 0
[scheduler]\nenabled = false\n[mcp]\nenabled = true\n[log]\naccess = false
[admin]\nlisten = "127.0.0.1:{admin}"\ntoken = "admin-secret"\n""")
    procs.append(subprocess.Popen([args.bin, "serve", "--config", f"{work}/mdproxy.toml", "--log", "error"],
                                  stdout=subprocess.DEVNULL))
    try:
        wait(sim_port)
        wait(port)
        base, mcp = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{port}/mcp"
        rest = f"{base}/api/v1/stock/detail/600519"
        urllib.request.urlopen(urllib.request.Request(rest, headers={"x-api-key": TOKEN})).read()
        session, _ = post(mcp, {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": REVISION, "capabilities": {}, "clientInfo": {"name": "wrk", "version": "1"}}})
        post(mcp, {"jsonrpc": "2.0", "method": "notifications/initialized"}, session)
        _, said = post(mcp, {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                             "params": {"name": "get_stock_info", "arguments": {"code": "600519"}}}, session)
        assert said["result"]["structuredContent"]["cache"] == "hit", said
        # wrk asks in the stateless 2026-07-28 revision: every request stands alone
        # (a 2025 session answers its requests one at a time: one agent's pace).
        meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientInfo": {"name": "wrk", "version": "1"},
                "io.modelcontextprotocol/clientCapabilities": {}}
        call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": "get_stock_info", "arguments": {"code": "600519"}, "_meta": meta}}
        check = urllib.request.Request(mcp, json.dumps(call).encode(), {
            "content-type": "application/json", "accept": "application/json, text/event-stream",
            "x-api-key": TOKEN, "mcp-protocol-version": "2026-07-28", "mcp-method": "tools/call",
            "mcp-name": "get_stock_info"})
        said = json.loads(urllib.request.urlopen(check).read())
        assert said["result"]["structuredContent"]["cache"] == "hit", said
        rest_lua, mcp_lua = f"{work}/rest.lua", f"{work}/mcp.lua"
        with open(rest_lua, "w") as f:
            f.write(f'wrk.headers["x-api-key"] = "{TOKEN}"\n')
        with open(mcp_lua, "w") as f:
            f.write('wrk.method = "POST"\n'
                    f'wrk.body = {json.dumps(json.dumps(call))}\n'
                    'wrk.headers["content-type"] = "application/json"\n'
                    'wrk.headers["accept"] = "application/json, text/event-stream"\n'
                    f'wrk.headers["x-api-key"] = "{TOKEN}"\n'
                    'wrk.headers["mcp-protocol-version"] = "2026-07-28"\n'
                    'wrk.headers["mcp-method"] = "tools/call"\n'
                    'wrk.headers["mcp-name"] = "get_stock_info"\n')
        rows = {"rest": [], "mcp": []}
        for r in range(args.rounds):
            order = [("rest", rest, rest_lua), ("mcp", mcp, mcp_lua)]
            for name, url, lua in (order if r % 2 == 0 else order[::-1]):
                rows[name].append(wrk(url, args.duration, args.connections, lua))
        ratios = [m[0] / r[0] for r, m in zip(rows["rest"], rows["mcp"])]
        med = lambda xs: statistics.median(xs)
        print(f"wrk -t2 -c{args.connections} -d{args.duration}s, {args.rounds} rounds interleaved; "
              "the same cached answer (stock detail 600519) as a REST GET and as a tools/call "
              "(stateless revision)")
        print("| request | req/s (median) | p99 ms (median) | REST / MCP req/s by round |")
        print("|---|---|---|---|")
        for name in ("rest", "mcp"):
            print(f"| {name} | {med([x[0] for x in rows[name]]):.0f} | {med([x[1] for x in rows[name]]):.2f} | |")
        print(f"| cost of a cached tool call / a REST hit | {1 / med(ratios):.2f} x | | "
              f"{min(1 / x for x in ratios):.2f}-{max(1 / x for x in ratios):.2f} |")
        tools = [("get_stock_info", {"code": "600519"}), ("get_stock_kline", {"code": "600519", "period": "week"}),
                 ("get_stock_quote", {"code": "600519"}), ("get_market_indices", {}),
                 ("get_stock_financial", {"code": "600519"}), ("get_news_summary", {})]
        codes = ["600519", "000001", "600036", "000858", "601318", "600000", "300750", "601012"]
        def upstream_requests():
            text = urllib.request.urlopen(urllib.request.Request(
                f"http://127.0.0.1:{admin}/metrics", headers={"authorization": "Bearer admin-secret"})).read().decode()
            return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                       if line.startswith("mdproxy_upstream_requests_total"))

        before = upstream_requests()

        async def team():
            await asyncio.gather(*(agent(mcp, args.calls, tools, codes, s) for s in range(args.agents)))
        started = time.monotonic()
        asyncio.run(team())
        elapsed = time.monotonic() - started
        asked = upstream_requests() - before
        made = args.agents * args.calls
        print(f"team: {args.agents} agents x {args.calls} calls over {len(tools)} tools and {len(codes)} codes "
              f"in {elapsed:.1f} s: {made} tool calls, {asked:.0f} upstream requests "
              f"({100 * (1 - asked / made):.1f} % spared)")
    finally:
        for p in procs:
            p.terminate()
            p.wait()


if __name__ == "__main__":
    main()
