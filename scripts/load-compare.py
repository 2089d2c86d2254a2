#!/usr/bin/env python3
"""Cache-hit throughput of mdproxy beside its anchors, in one run (issue 11, goal 5).

Started by scripts/load-compare.sh, which installs the tools and builds the binaries.
Puts mdproxy (`serve`), nginx proxy_cache, Varnish and a bare hyper server (serving
mdproxy's own answers, byte for byte, from prebuilt buffers) in front of one
simulator; warms each cache and checks every answer is a hit of the same length;
runs `wrk --latency` against each, rounds interleaved (the server order rotates each
round); runs h2load over h2c (prior knowledge) against mdproxy and the bare server;
checks the simulator saw no request while measuring; prints one table and writes
the raw figures as JSON. Standard library only. Every wait is bounded and every
process it starts is stopped on exit."""

import argparse
import atexit
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

import harness
from harness import free_port

# The answers: name -> (target relative to /api/v1, the coding asked for or None).
# Sizes from the simulator (checked and printed each run): a stock's detail 421 B,
# the indices 1.2 KB, a seven-stock watchlist 2.8 KB, 000001's weekly K-line 136 KB
# and daily 657 KB. (The table had 589 B for the detail and 2.9 KB for the
# indices; the simulator's answers have shrunk since, so the watchlist stands in for
# 2.9 KB.) Each also as `-gz`, `-br` and `-zstd`: `Accept-Encoding` naming that one
# coding (nginx-light and Varnish compress gzip only: they answer br and zstd plain).
WATCHLIST = "/stock/list?codes=600519,000001,600036,000858,601318,600000,300750"
WEEK = "/stock/kline?code=000001&period=week"
DAY = "/stock/kline?code=000001&period=day"
BASES = {
    "detail": "/stock/detail/600519",
    "indices": "/market/indices",
    "watchlist": WATCHLIST,
    "week": WEEK,
    "day": DAY,
}
CODINGS = {"": None, "-gz": "gzip", "-br": "br", "-zstd": "zstd"}
FILE_SUFFIX = {"gzip": ".gz", "br": ".br", "zstd": ".zstd"}
ANSWERS = {base + suffix: (target, coding)
           for base, target in BASES.items() for suffix, coding in CODINGS.items()}
LABELS = {"detail": "stock detail", "indices": "indices", "watchlist": "7-stock list",
          "week": "weekly K-line", "day": "daily K-line"}
DEFAULT_SIZES = "detail,watchlist,watchlist-gz,week,week-gz,day"
SERVERS = ["mdproxy", "candidate", "before", "nginx", "varnish", "bare"]
TITLES = {"mdproxy": "mdproxy", "candidate": "candidate", "before": "before", "nginx": "nginx",
          "varnish": "Varnish", "bare": "bare hyper", "relay": "bare relay", "raw": "raw relay"}
CLIENT_TOKEN = "load-token"
UPSTREAM_TOKEN = "sim-secret"
ADMIN_TOKEN = "load-admin"
START_WAIT = 20.0  # seconds any server may take to listen

processes = []  # (name, Popen)
work = None


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def cleanup():
    global work
    for name, p in reversed(processes):
        if p.poll() is None:
            p.terminate()
    deadline = time.monotonic() + 5
    for name, p in reversed(processes):
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout=5)
    processes.clear()
    if work and not os.environ.get("KEEP"):
        shutil.rmtree(work, ignore_errors=True)
    elif work:
        log(f"kept {work}")
    work = None


def on_signal(signum, _frame):
    cleanup()
    sys.exit(128 + signum)


def start(name, argv, **kw):
    out = open(os.path.join(work, f"{name}.log"), "wb")
    p = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, **kw)
    processes.append((name, p))
    return p


def wait_listening(name, port, p):
    harness.wait_listening(name, port, p, os.path.join(work, f"{name}.log"), START_WAIT)


def get(url, headers=None, timeout=10):
    """GET url: (status, headers as a lower-cased dict, raw body). No decoding."""
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    except urllib.error.HTTPError as e:
        return e.code, {k.lower(): v for k, v in e.headers.items()}, e.read()


def raw_head(port, target, headers):
    """The answer's head exactly as sent (for the bare server's copy) and its body."""
    lines = [f"GET {target} HTTP/1.1", "Host: 127.0.0.1", "Connection: close"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    text = head.decode("latin-1")
    m = re.search(r"(?im)^content-length:\s*(\d+)", text)
    if not m or int(m.group(1)) != len(body):
        raise SystemExit(f"{target}: an answer without a matching Content-Length:\n{text}")
    return text + "\r\n\r\n", body


def sim_total(sim_port):
    _, _, body = get(f"http://127.0.0.1:{sim_port}/_sim/stats")
    return json.loads(body)["total"]


# ---------------------------------------------------------------- server set-up


def mdproxy_config(path, port, sim_port, admin_port):
    with open(path, "w") as f:
        f.write(
            f"""[server]
listen = "127.0.0.1:{port}"
[admin]
# The miss flood purges the 404s it left before each round of unlisted codes.
listen = "127.0.0.1:{admin_port}"
token = "{ADMIN_TOKEN}"
[auth]
tokens = ["{CLIENT_TOKEN}"]
[upstream]
base_url = "http://127.0.0.1:{sim_port}/api/v1"
token = "{UPSTREAM_TOKEN}"
[limits]
# The miss flood measures the fill path, not the budget.
upstream_rps = 0
[scheduler]
enabled = false
# Keep every measured key fresh for the whole run: this measures hits, not refreshes.
# (detail and indices are `live`, K-lines `intraday`.)
[freshness.classes.live]
session_fresh_secs = 3600
closed_fresh_secs = 3600
until_open = false
[freshness.classes.intraday]
session_fresh_secs = 3600
closed_fresh_secs = 3600
until_open = false
"""
        )


# Varnish keeps one object per encoding the client accepts (hashed on a normalised
# Accept-Encoding), and gzips the gzip one itself when it is fetched
# (beresp.do_gzip): neither variant is transformed per request. Its built-in
# vcl_recv would pass every request with Authorization; this one hashes them.
VCL = """vcl 4.1;
backend sim {{ .host = "127.0.0.1"; .port = "{sim_port}"; }}
sub vcl_recv {{
  if (req.http.Accept-Encoding ~ "gzip") {{ set req.http.X-AE = "gzip"; }}
  else {{ set req.http.X-AE = "identity"; }}
  unset req.http.Authorization;
  return (hash);
}}
sub vcl_hash {{
  hash_data(req.url);
  hash_data(req.http.X-AE);
  return (lookup);
}}
sub vcl_backend_fetch {{
  set bereq.http.Authorization = "Bearer {token}";
  unset bereq.http.Accept-Encoding;
  return (fetch);
}}
sub vcl_backend_response {{
  set beresp.ttl = 1h;
  set beresp.grace = 1h;
  if (bereq.http.X-AE == "gzip") {{ set beresp.do_gzip = true; }}
  return (deliver);
}}
sub vcl_deliver {{
  if (obj.hits > 0) {{ set resp.http.X-Cache = "HIT"; }} else {{ set resp.http.X-Cache = "MISS"; }}
  return (deliver);
}}
"""


def is_hit(server, headers):
    if server in ("mdproxy", "candidate", "before", "bare"):
        return headers.get("x-cache", "").upper().startswith("HIT")
    return headers.get("x-cache", "").upper() == "HIT"


# ---------------------------------------------------------------- measurement

UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 60e3}


def to_ms(text):
    m = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text)
    return float(m.group(1)) * UNITS[m.group(2)] if m else None


def run_wrk(url, coding, args):
    cmd = ["wrk", f"-t{args.threads}", f"-c{args.connections}", f"-d{args.duration}s", "--latency",
           "-H", f"Authorization: Bearer {CLIENT_TOKEN}"]
    if coding:
        cmd += ["-H", f"Accept-Encoding: {coding}"]
    cmd.append(url)
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=args.duration + 60).stdout
    return parse_wrk(out, url)


def parse_wrk(out, url):
    result = {"rps": None, "p50_ms": None, "p99_ms": None, "errors": 0, "non_2xx": 0, "requests": 0}
    m = re.search(r"Requests/sec:\s+([\d.]+)", out)
    if m:
        result["rps"] = float(m.group(1))
    for pct, key in (("50", "p50_ms"), ("99", "p99_ms")):
        m = re.search(rf"^\s+{pct}%\s+(\S+)", out, re.M)
        if m:
            result[key] = to_ms(m.group(1))
    m = re.search(r"(\d+) requests in", out)
    if m:
        result["requests"] = int(m.group(1))
    m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    if m:
        result["errors"] = sum(int(x) for x in m.groups())
    m = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if m:
        result["non_2xx"] = int(m.group(1))
    if result["rps"] is None:
        log(f"wrk gave no rate for {url}:\n{out}")
    return result


# Every request a key no server has seen: each wrk thread counts from its own base
# (a random offset per run, so rounds never meet each other's keys), spread over
# page (1..100000) and pageSize (1..1000) of a macro table. Most such pages are
# past the table's end: small answers, so the fill path is what is measured.
# The miss flood's kinds (as scripts/miss-cost.py has them): every request a key
# never asked before. A news search (a ~10 KB answer), a CPI page (mostly 58 B) and
# an unlisted stock code (the upstream's 404, cached briefly as one).
# The unlisted codes (605000..994999): a ring too small for a random base. mdproxy
# keeps a 404 30 s: before each round of that kind its 404s are purged (`purge_404s`)
# and the round floods the whole ring, each wrk thread a part of it (`miss_keys`).
# nginx keeps nothing of it, but with NGINX_CACHE_404 it keeps them too and has no
# purge: then each round floods a slice of its own, so that a server's rounds never
# meet each other's keys (on a fast machine a round may outrun its slice: noted).
UNLISTED_CODES = 390_000
MISS_TARGETS = {
    "news-search": '"/api/v1/news/search?keyword=miss" .. n',
    "cpi-page": '"/api/v1/macro/cpi?page=" .. (n % 100000 + 1) .. "&pageSize=" .. (math.floor(n / 100000) % 1000 + 1)',
    "unlisted-code": '"/api/v1/stock/detail/" .. (605000 + n % ' + str(UNLISTED_CODES) + ')',
    # The news search again, as a browser or Python's requests asks: gzip taken.
    # Every server compresses then (nginx each answer, Varnish and mdproxy the
    # object they store), where the plain floods leave nginx nothing to compress.
    "news-search-gz": '"/api/v1/news/search?keyword=missgz" .. n',
}
MISS_HEADERS = {"news-search-gz": ["-H", "Accept-Encoding: gzip"]}

MISS_LUA = """
local counter = 0
local base = {base}
local threads = 0
function setup(thread)
  thread:set("id", threads)
  threads = threads + 1
end
function request()
  counter = counter + 1
  local n = base + id * {stride} + counter
  return wrk.format("GET", {target})
end
"""


def miss_keys(kind, round_index, args):
    """Where round `round_index`'s keys of `kind` start, how far apart its wrk
    threads' start, and how many requests a thread may make before its keys meet
    another's (None: never, in practice)."""
    if kind == "unlisted-code":
        slices = max(args.miss_rounds, 1) if args.nginx_cache_404 else 1
        stride = UNLISTED_CODES // slices // args.threads
        return round_index % slices * stride * args.threads, stride, stride
    # Lua's numbers are doubles: the keys stay whole numbers well under 2^53, so
    # each prints as its digits and none repeats (a base past 2^53 made them).
    return fastrand() * 1_000, 50_000_000, None


def run_miss(url, token, kind, round_index, args):
    """A miss flood of `kind` against the server at `url` (its root): wrk with
    MISS_LUA. Marks a round whose keys ran into others' (then not all misses)."""
    script = os.path.join(work, f"miss-{fastrand()}.lua")
    base, stride, room = miss_keys(kind, round_index, args)
    with open(script, "w") as f:
        f.write(MISS_LUA.format(base=base, stride=stride, target=MISS_TARGETS[kind]))
    cmd = ["wrk", f"-t{args.threads}", f"-c{args.connections}", f"-d{args.duration}s", "--latency",
           "-H", f"Authorization: Bearer {token}", *MISS_HEADERS.get(kind, []), "-s", script, url]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=args.duration + 60).stdout
    result = parse_wrk(out, url)
    if room is not None and result["requests"] > room * args.threads:
        result["keys_wrapped"] = True
    return result


def purge_404s(admin_port):
    """Drops every answer of the unlisted codes' endpoint an mdproxy holds (its
    cached 404s), so that a round of them is all misses again."""
    req = urllib.request.Request(
        f"http://127.0.0.1:{admin_port}/purge?endpoint=/stock/detail/%7Bcode%7D",
        method="POST", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
    with urllib.request.urlopen(req, timeout=60) as r:
        if r.status != 200:
            raise SystemExit(f"purge on {admin_port}: {r.status}")


TICK = os.sysconf("SC_CLK_TCK")


def tree_cpu(pid):
    """CPU seconds (user, system) spent so far by `pid` and every process under it
    (nginx's workers, Varnish's child), from /proc."""
    children, stats = {}, {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # After the name: state ppid ... utime (14th field) stime (15th).
        children.setdefault(int(fields[1]), []).append(int(d))
        stats[int(d)] = (int(fields[11]), int(fields[12]))
    user = system = 0
    todo = [pid]
    while todo:
        p = todo.pop()
        u, s = stats.get(p, (0, 0))
        user, system = user + u, system + s
        todo += children.get(p, [])
    return user / TICK, system / TICK


def fastrand():
    return int.from_bytes(os.urandom(3), "little")


def run_h2load(url, coding, args):
    cmd = ["h2load", "-D", str(args.duration), "-c", str(args.connections), "-m", str(args.h2_streams),
           "-t", str(args.threads), "-H", f"authorization: Bearer {CLIENT_TOKEN}"]
    if coding:
        cmd += ["-H", f"accept-encoding: {coding}"]
    cmd.append(url)
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=args.duration + 60).stdout
    result = {"rps": None, "mean_ms": None, "succeeded": 0, "failed": 0, "non_2xx": 0}
    m = re.search(r"finished in [\d.]+\w+, ([\d.]+) req/s", out)
    if m:
        result["rps"] = float(m.group(1))
    m = re.search(r"requests: \d+ total, \d+ started, \d+ done, (\d+) succeeded, (\d+) failed, (\d+) errored", out)
    if m:
        result["succeeded"] = int(m.group(1))
        result["failed"] = int(m.group(2)) + int(m.group(3))
    m = re.search(r"status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx", out)
    if m:
        result["non_2xx"] = sum(int(x) for x in m.groups()[1:])
    m = re.search(r"time for request:\s+\S+\s+\S+\s+(\S+)", out)
    if m:
        result["mean_ms"] = to_ms(m.group(1))
    if result["rps"] is None:
        log(f"h2load gave no rate for {url}:\n{out}")
    return result


def size_label(n):
    if n < 1000:
        return f"{n} B"
    if n < 1_000_000:
        return f"{n / 1000:.1f} KB" if n < 10_000 else f"{n / 1000:.0f} KB"
    return f"{n / 1e6:.1f} MB"


def rate(x):
    if x is None:
        return "-"
    return f"{x / 1000:.1f}k" if x >= 1000 else f"{x:.0f}"


def ms(x):
    return "-" if x is None else (f"{x:.2f}" if x < 10 else f"{x:.1f}")


def round_ratios(md_runs, bare_runs):
    """mdproxy / bare of each round: the two ran one beside the other, so a slow spell
    of the machine weighs on both."""
    return [m["rps"] / b["rps"] for m, b in zip(md_runs, bare_runs) if m["rps"] and b["rps"]]


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def main():
    global work
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--bare", required=True)
    ap.add_argument("--relay", default="",
                    help="examples/bare_relay: the miss floods' floor on mdproxy's stack (ONLY names 'relay'; "
                         "'raw' runs it with --raw, without hyper)")
    ap.add_argument("--candidate", default="",
                    help="another mdproxy binary, measured beside --bin with the same config (an A/B of two builds)")
    ap.add_argument("--duration", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--connections", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--sizes", default=DEFAULT_SIZES)
    ap.add_argument("--only", default=",".join(SERVERS))
    ap.add_argument("--h2-sizes", default="detail,watchlist")
    ap.add_argument("--h2-streams", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=1, help="seconds of wrk per server and answer before round 1")
    ap.add_argument("--miss-kinds", default=",".join(MISS_TARGETS))
    ap.add_argument("--miss-rounds", type=int, default=2,
                    help="rounds of the miss flood (every request a new key) after the hit rounds; 0: none")
    ap.add_argument("--json", default="target/load/results.json")
    ap.add_argument("--nginx-cache-404", action="store_true",
                    help="nginx also keeps the upstream's 404s 30 s, as mdproxy does")
    ap.add_argument("--before", default="",
                    help="another mdproxy binary (an earlier build) measured beside --bin as 'before'")
    args = ap.parse_args()

    sizes = [s for s in args.sizes.split(",") if s]
    for s in sizes:
        if s not in ANSWERS:
            raise SystemExit(f"SIZES: unknown answer {s!r}; known: {', '.join(ANSWERS)}")
    # The relays answer misses only: they are flooded, never asked for hits.
    relays = [r for r in ("relay", "raw") if r in args.only.split(",")]
    if relays and not args.relay:
        raise SystemExit(f"ONLY names {relays} but --relay (examples/bare_relay) is not set")
    servers = [s for s in args.only.split(",") if s and s not in ("candidate", "relay", "raw")]
    if args.before and "before" not in servers:
        servers.insert(servers.index("mdproxy") + 1 if "mdproxy" in servers else 0, "before")
    if "before" in servers and not args.before:
        raise SystemExit("ONLY names 'before' but BEFORE (an earlier mdproxy binary) is not set")
    for s in servers:
        if s not in SERVERS:
            raise SystemExit(f"ONLY: unknown server {s!r}; known: {', '.join(SERVERS)}")
    if args.candidate:
        servers.insert(servers.index("mdproxy") + 1 if "mdproxy" in servers else 0, "candidate")
    h2_sizes = [s for s in args.h2_sizes.split(",") if s]
    for s in h2_sizes:
        if s not in ANSWERS:
            raise SystemExit(f"H2_SIZES: unknown answer {s!r}; known: {', '.join(ANSWERS)}")
    h2_servers = [s for s in ("mdproxy", "candidate", "bare") if s in servers]

    work = tempfile.mkdtemp(prefix="load-compare-")
    os.chmod(work, 0o755)  # varnishd's unprivileged children read their work dir
    atexit.register(cleanup)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    ports = {name: free_port() for name in ["sim", "relay", "raw"] + SERVERS}
    admin_ports = {name: free_port() for name in ("mdproxy", "candidate", "before")}
    sim = start("sim", [args.bin, "sim", "--listen", f"127.0.0.1:{ports['sim']}", "--token", UPSTREAM_TOKEN, "--log", "warn"])
    wait_listening("sim", ports["sim"], sim)

    # mdproxy also runs when only the bare server is measured: its answers are the
    # bare server's bytes.
    need_mdproxy = "mdproxy" in servers or "bare" in servers
    if need_mdproxy:
        cfg = os.path.join(work, "mdproxy.toml")
        mdproxy_config(cfg, ports["mdproxy"], ports["sim"], admin_ports["mdproxy"])
        p = start("mdproxy", [args.bin, "serve", "--config", cfg, "--log", "warn"])
        wait_listening("mdproxy", ports["mdproxy"], p)
    if "candidate" in servers:
        cfg = os.path.join(work, "candidate.toml")
        mdproxy_config(cfg, ports["candidate"], ports["sim"], admin_ports["candidate"])
        p = start("candidate", [args.candidate, "serve", "--config", cfg, "--log", "warn"])
        wait_listening("candidate", ports["candidate"], p)
    if "before" in servers:
        cfg = os.path.join(work, "before.toml")
        mdproxy_config(cfg, ports["before"], ports["sim"], admin_ports["before"])
        p = start("before", [args.before, "serve", "--config", cfg, "--log", "warn"])
        wait_listening("before", ports["before"], p)
    if "nginx" in servers:
        cfg = os.path.join(work, "nginx.conf")
        # The cache on tmpfs, as an operator tuning nginx for speed keeps it.
        cache_dir = tempfile.mkdtemp(prefix="load-compare-nginx-", dir="/dev/shm")
        atexit.register(shutil.rmtree, cache_dir, True)
        harness.nginx_proxy_cache(cfg, ports["nginx"], ports["sim"], cache_dir, UPSTREAM_TOKEN,
                                  args.nginx_cache_404)
        p = start("nginx", ["nginx", "-c", cfg, "-p", work])
        wait_listening("nginx", ports["nginx"], p)
    if "varnish" in servers:
        vcl = os.path.join(work, "default.vcl")
        with open(vcl, "w") as f:
            f.write(VCL.format(sim_port=ports["sim"], token=UPSTREAM_TOKEN))
        os.chmod(vcl, 0o644)
        p = start("varnish", ["varnishd", "-F", "-a", f"127.0.0.1:{ports['varnish']}", "-f", vcl,
                              "-s", "malloc,256m", "-n", os.path.join(work, "varnish"),
                              "-T", f"127.0.0.1:{free_port()}"])
        wait_listening("varnish", ports["varnish"], p)

    for r in relays:
        p = start(r, [args.relay, *(["--raw"] if r == "raw" else []), "--listen", f"127.0.0.1:{ports[r]}",
                      "--upstream", f"127.0.0.1:{ports['sim']}", "--token", UPSTREAM_TOKEN])
        wait_listening(r, ports[r], p)

    auth = {"Authorization": f"Bearer {CLIENT_TOKEN}"}
    base = {s: f"http://127.0.0.1:{ports[s]}/api/v1" for s in SERVERS}

    # What each answer is, from the simulator itself.
    sim_sizes = {}
    for name in dict.fromkeys(sizes + h2_sizes):
        target, _ = ANSWERS[name]
        status, _, body = get(f"http://127.0.0.1:{ports['sim']}/api/v1{target}",
                                 {"Authorization": f"Bearer {UPSTREAM_TOKEN}"})
        if status != 200:
            raise SystemExit(f"the simulator answers {target} with {status}")
        sim_sizes[target] = len(body)

    # The bare server's answers: mdproxy's own heads and bodies (a hit each).
    if "bare" in servers:
        bare_dir = os.path.join(work, "bare")
        os.makedirs(bare_dir)
        index = []
        for i, target in enumerate(dict.fromkeys(ANSWERS[n][0] for n in sizes)):
            full = f"/api/v1{target}"
            get(base["mdproxy"] + target, auth)  # fill
            variants = [("", {})] + [(FILE_SUFFIX[c], {"Accept-Encoding": c}) for c in FILE_SUFFIX]
            for suffix, extra in variants:
                head, body = raw_head(ports["mdproxy"], full, {**auth, **extra})
                if not re.search(r"(?im)^x-cache:\s*hit", head):
                    raise SystemExit(f"mdproxy's answer for {target} is not a hit:\n{head}")
                with open(os.path.join(bare_dir, f"a{i}{suffix}.headers"), "w", encoding="latin-1") as f:
                    f.write(head)
                with open(os.path.join(bare_dir, f"a{i}{suffix}.body"), "wb") as f:
                    f.write(body)
            index.append(f"a{i}\t{full}")
        with open(os.path.join(bare_dir, "index"), "w") as f:
            f.write("\n".join(index) + "\n")
        p = start("bare", [args.bare, "--listen", f"127.0.0.1:{ports['bare']}", "--dir", bare_dir])
        wait_listening("bare", ports["bare"], p)

    # Warm every cache, then check each answer is a hit, and its length.
    lengths = {}  # (answer, server) -> body bytes on the wire
    encodings = {}  # (answer, server) -> Content-Encoding answered
    notes = []
    for name in sizes:
        target, coding = ANSWERS[name]
        hdrs = {**auth, **({"Accept-Encoding": coding} if coding else {})}
        for server in servers:
            url = base[server] + target
            get(url, hdrs)
            status, h, body = get(url, hdrs)
            # mdproxy makes a coding no fill was asked for in the background, and
            # serves the identity body until it is made.
            for _ in range(100):
                if not coding or h.get("content-encoding", "identity") == coding or sim_sizes[target] < 1024:
                    break
                time.sleep(0.02)
                status, h, body = get(url, hdrs)
            if status != 200:
                raise SystemExit(f"{server} answers {target} with {status}")
            if not is_hit(server, h):
                raise SystemExit(f"{server}: {target} is not a cache hit after warming: {h}")
            encoding = h.get("content-encoding", "identity")
            encodings[(name, server)] = encoding
            if (coding or "identity") != encoding and sim_sizes[target] >= 1024:
                notes.append(f"{name}: {server} answers Content-Encoding {encoding}")
            lengths[(name, server)] = len(body)
        ref = lengths[(name, servers[0])]
        for server in servers[1:]:
            n = lengths[(name, server)]
            # Another coding, or another level of the same: the bytes column shows it.
            if abs(n - ref) > 0.02 * ref and encodings[(name, server)] == encodings[(name, servers[0])] == "identity":
                notes.append(f"{name}: {server} sends {n} bytes, {servers[0]} {ref}")
    for s in sizes:
        log(f"{s:<11} {ANSWERS[s][0]:<40} simulator {sim_sizes[ANSWERS[s][0]]} B; on the wire: "
            + ", ".join(f"{srv} {lengths[(s, srv)]}" for srv in servers))

    if args.warmup > 0:
        for name in sizes:
            target, coding = ANSWERS[name]
            for server in servers:
                w = argparse.Namespace(**{**vars(args), "duration": args.warmup})
                run_wrk(base[server] + target, coding, w)

    upstream_before = sim_total(ports["sim"])
    started = time.time()
    runs = {(n, s): [] for n in sizes for s in servers}
    h2runs = {(n, s): [] for n in h2_sizes for s in h2_servers}
    total_runs = args.rounds * (len(sizes) * len(servers) + len(h2_sizes) * len(h2_servers))
    done = 0
    for r in range(args.rounds):
        order = servers[r % len(servers):] + servers[: r % len(servers)]
        for name in sizes:
            target, coding = ANSWERS[name]
            for server in order:
                done += 1
                log(f"[{done}/{total_runs}] round {r + 1} wrk {name} {server}")
                runs[(name, server)].append(run_wrk(base[server] + target, coding, args))
        h2order = h2_servers[r % max(1, len(h2_servers)):] + h2_servers[: r % max(1, len(h2_servers))]
        for name in h2_sizes:
            target, coding = ANSWERS[name]
            for server in h2order:
                done += 1
                log(f"[{done}/{total_runs}] round {r + 1} h2load {name} {server}")
                h2runs[(name, server)].append(run_h2load(base[server] + target, coding, args))
    upstream_during = sim_total(ports["sim"]) - upstream_before  # before the miss flood
    if upstream_during:
        notes.append(f"the simulator got {upstream_during} requests while measuring: something was not served from cache")
    for (name, server), rs in runs.items():
        bad = sum(x["errors"] + x["non_2xx"] for x in rs)
        if bad:
            notes.append(f"{name} {server}: {bad} socket errors or non-2xx answers under wrk")
    for (name, server), rs in h2runs.items():
        bad = sum(x["failed"] + x["non_2xx"] for x in rs)
        if bad:
            notes.append(f"h2 {name} {server}: {bad} failed or non-2xx requests under h2load")

    # ---- the miss flood: every request a key never seen, in front of the simulator;
    # the simulator asked directly is the ceiling.
    miss_servers = ([s for s in ("mdproxy", "candidate", "before", "nginx", "varnish") if s in servers]
                    + relays + ["simulator"])
    miss_kinds = [k for k in args.miss_kinds.split(",") if k]
    for k in miss_kinds:
        if k not in MISS_TARGETS:
            raise SystemExit(f"MISS_KINDS: unknown kind {k!r}; known: {', '.join(MISS_TARGETS)}")
    miss_runs = {(k, s): [] for k in miss_kinds for s in miss_servers}
    pid_of = {name: p.pid for name, p in processes}
    pid_of["simulator"] = sim.pid
    miss_before = sim_total(ports["sim"])
    for r in range(args.miss_rounds):
        order = miss_servers[r % len(miss_servers):] + miss_servers[: r % len(miss_servers)]
        for kind in miss_kinds:
            for server in order:
                log(f"miss round {r + 1} {kind} {server}")
                if server == "simulator":
                    url, token = f"http://127.0.0.1:{ports['sim']}", UPSTREAM_TOKEN
                else:
                    url, token = f"http://127.0.0.1:{ports[server]}", CLIENT_TOKEN
                if kind == "unlisted-code" and server in admin_ports:
                    purge_404s(admin_ports[server])
                pids = {"server": pid_of[server], "simulator": sim.pid}
                before = {k: tree_cpu(v) for k, v in pids.items()}
                run = run_miss(url, token, kind, r, args)
                # CPU per request of the server and of the simulator behind it
                # (microseconds, user + system): where a miss's time goes.
                for k, v in pids.items():
                    (u0, s0), (u1, s1) = before[k], tree_cpu(v)
                    n = max(run["requests"], 1)
                    run[f"{k}_cpu_us"] = {"user": (u1 - u0) / n * 1e6, "system": (s1 - s0) / n * 1e6}
                miss_runs[(kind, server)].append(run)
    miss_upstream = sim_total(ports["sim"]) - miss_before
    for (kind, server), rs in miss_runs.items():
        # An unlisted code is the upstream's 404: the answer expected.
        bad = sum(x["errors"] + (0 if kind == "unlisted-code" else x["non_2xx"]) for x in rs)
        # Only a server that keeps what it was asked meets its earlier keys as hits.
        keeps = server in admin_ports or (server == "nginx" and args.nginx_cache_404)
        if keeps and any(x.get("keys_wrapped") for x in rs):
            notes.append(f"miss flood {kind} {server}: a round asked more keys than its slice of "
                         f"{UNLISTED_CODES:,} codes; some of its requests were keys asked before")
        if bad:
            notes.append(f"miss flood {kind} {server}: {bad} socket errors or unexpected answers")

    # ---- the table
    cols = [s for s in SERVERS if s in servers]
    header = ["answer"] + [TITLES[s] for s in cols]
    if "mdproxy" in cols and "bare" in cols:
        header += ["md/bare", "by round"]
    if "mdproxy" in cols and "candidate" in cols:
        header += ["cand/md", "by round"]
    if "mdproxy" in cols and "before" in cols:
        header += ["md/before", "by round"]
    if "mdproxy" in cols and "nginx" in cols:
        header.append("md/nginx")
    header += [f"p99 {TITLES[s]}" for s in cols]
    header.append("bytes/answer " + " / ".join(TITLES[s] for s in cols))
    rows = []
    result_rows = []
    for name in sizes:
        target, coding = ANSWERS[name]
        ident = sim_sizes[target]
        base_name = name
        for suffix in CODINGS:
            if suffix and name.endswith(suffix):
                base_name = name.removesuffix(suffix)
        label = f"{size_label(ident)} {LABELS[base_name]}"
        if coding:
            wire = lengths[(name, "mdproxy")] if "mdproxy" in servers else lengths[(name, cols[0])]
            label += f", {coding} ({size_label(wire)})" if wire < ident else f", {coding} asked (sent plain)"
            plain = [TITLES[s] for s in cols if encodings[(name, s)] == "identity" and s != "bare"]
            if plain and wire < ident:
                label += f"; {', '.join(plain)}: no {coding}, sent plain"
        rps = {s: median(x["rps"] for x in runs[(name, s)]) for s in cols}
        p99 = {s: median(x["p99_ms"] for x in runs[(name, s)]) for s in cols}
        row = [label] + [rate(rps[s]) for s in cols]
        ratios = {}
        if "mdproxy" in cols and "bare" in cols:
            ratios["mdproxy/bare"] = rps["mdproxy"] / rps["bare"] if rps["mdproxy"] and rps["bare"] else None
            row.append("-" if ratios["mdproxy/bare"] is None else f"{ratios['mdproxy/bare']:.2f}")
            paired = round_ratios(runs[(name, "mdproxy")], runs[(name, "bare")])
            ratios["mdproxy/bare by round"] = paired
            row.append(f"{min(paired):.2f}-{max(paired):.2f}" if paired else "-")
        if "mdproxy" in cols and "candidate" in cols:
            ratios["candidate/mdproxy"] = rps["candidate"] / rps["mdproxy"] if rps["candidate"] and rps["mdproxy"] else None
            row.append("-" if ratios["candidate/mdproxy"] is None else f"{ratios['candidate/mdproxy']:.2f}")
            paired = round_ratios(runs[(name, "candidate")], runs[(name, "mdproxy")])
            ratios["candidate/mdproxy by round"] = paired
            row.append(f"{min(paired):.2f}-{max(paired):.2f}" if paired else "-")
        if "mdproxy" in cols and "before" in cols:
            ratios["mdproxy/before"] = rps["mdproxy"] / rps["before"] if rps["mdproxy"] and rps["before"] else None
            row.append("-" if ratios["mdproxy/before"] is None else f"{ratios['mdproxy/before']:.2f}")
            paired = round_ratios(runs[(name, "mdproxy")], runs[(name, "before")])
            ratios["mdproxy/before by round"] = paired
            row.append(f"{min(paired):.2f}-{max(paired):.2f}" if paired else "-")
        if "mdproxy" in cols and "nginx" in cols:
            ratios["mdproxy/nginx"] = rps["mdproxy"] / rps["nginx"] if rps["mdproxy"] and rps["nginx"] else None
            row.append("-" if ratios["mdproxy/nginx"] is None else f"{ratios['mdproxy/nginx']:.2f}")
        row += [ms(p99[s]) for s in cols]
        row.append(" / ".join(str(lengths[(name, s)]) for s in cols))
        rows.append(row)
        result_rows.append({
            "answer": name, "target": target, "coding": coding, "simulator_bytes": ident,
            "wire_bytes": {s: lengths[(name, s)] for s in cols},
            "content_encoding": {s: encodings[(name, s)] for s in cols},
            "rps_median": rps, "p99_ms_median": p99, "ratios": ratios,
            "runs": {s: runs[(name, s)] for s in cols},
        })

    widths = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header))]
    print()
    print(f"wrk -t{args.threads} -c{args.connections} -d{args.duration}s --latency, {args.rounds} round(s) "
          f"interleaved; req/s = median of rounds, md/bare = ratio of the medians (and its range over "
          f"the rounds, each server's run beside the other's), p99 in ms = median of rounds")
    print("| " + " | ".join(h.ljust(w) for h, w in zip(header, widths)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for r in rows:
        print("| " + " | ".join(str(c).ljust(w) if i == 0 else str(c).rjust(w) for i, (c, w) in enumerate(zip(r, widths))) + " |")

    h2_results = []
    if h2runs:
        print()
        print(f"h2load -D {args.duration} -c{args.connections} -m{args.h2_streams} -t{args.threads}, "
              f"HTTP/2 cleartext by prior knowledge:")
        for name in h2_sizes:
            target, coding = ANSWERS[name]
            parts = []
            entry = {"answer": name, "target": target, "coding": coding}
            for s in h2_servers:
                rs = h2runs[(name, s)]
                rps, mean_ms = median(x["rps"] for x in rs), median(x["mean_ms"] for x in rs)
                parts.append(f"{TITLES[s]} {rate(rps)} req/s (mean {ms(mean_ms)} ms)")
                entry[s] = {"rps_median": rps, "mean_ms_median": mean_ms, "runs": rs}
            if "mdproxy" in entry and "bare" in entry and entry["mdproxy"]["rps_median"] and entry["bare"]["rps_median"]:
                ratio = entry["mdproxy"]["rps_median"] / entry["bare"]["rps_median"]
                parts.append(f"md/bare {ratio:.2f}")
                entry["mdproxy/bare"] = ratio
            if "mdproxy" in entry and "candidate" in entry and entry["mdproxy"]["rps_median"] and entry["candidate"]["rps_median"]:
                ratio = entry["candidate"]["rps_median"] / entry["mdproxy"]["rps_median"]
                parts.append(f"cand/md {ratio:.2f}")
                entry["candidate/mdproxy"] = ratio
            base_name = next((name.removesuffix(x) for x in CODINGS if x and name.endswith(x)), name)
            print(f"  {size_label(sim_sizes[target])} {LABELS[base_name]}{', ' + coding if coding else ''}: " + ", ".join(parts))
            h2_results.append(entry)

    miss_result = {}
    if args.miss_rounds:
        print()
        print(f"Miss flood: every request a new key, wrk -t{args.threads} -c{args.connections} "
              f"-d{args.duration}s, {args.miss_rounds} round(s) interleaved (req/s per round; the "
              "simulator asked directly is the ceiling; nginx's cache on tmpfs):")
        for kind in miss_kinds:
            print(f"  {kind}:")
            result = miss_result.setdefault(kind, {})
            for server in miss_servers:
                rs = miss_runs[(kind, server)]
                rates = [x["rps"] for x in rs]
                p99s = [x["p99_ms"] for x in rs]
                result[server] = {"runs": rs}
                cpu = " / ".join(f"{x['server_cpu_us']['user']:.0f}+{x['server_cpu_us']['system']:.0f}"
                                 for x in rs)
                print(f"    {TITLES.get(server, server):<10} " + " / ".join(rate(x) for x in rates)
                      + f"   p99 " + " / ".join(ms(x) for x in p99s) + " ms"
                      + f"   CPU us/request user+system {cpu}")
            for other in ("nginx", "varnish", "before", "candidate", "relay", "raw"):
                if (kind, other) not in miss_runs or (kind, "mdproxy") not in miss_runs:
                    continue
                ratios = [a["rps"] / b["rps"] for a, b in zip(miss_runs[(kind, "mdproxy")], miss_runs[(kind, other)])
                          if a["rps"] and b["rps"]]
                if ratios:
                    print(f"    md/{other} by round: " + " / ".join(f"{x:.2f}" for x in ratios))
                    result[f"mdproxy/{other} by round"] = ratios
        print(f"  upstream requests during the flood: {miss_upstream}")

    print()
    print(f"upstream requests while measuring: {upstream_during} (every answer a hit when 0)")
    for n in notes:
        print(f"note: {n}")

    def version(cmd):
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
            return (r.stdout + r.stderr).strip().splitlines()[0]
        except Exception as e:  # a tool missing from ONLY's subset
            return f"unknown ({e})"

    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump({
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
            "settings": {"duration_s": args.duration, "rounds": args.rounds, "connections": args.connections,
                         "threads": args.threads, "h2_streams": args.h2_streams, "servers": servers,
                         "sizes": sizes, "h2_sizes": h2_sizes,
                         "nginx_cache_404": args.nginx_cache_404},
            "machine": {"cpus": os.cpu_count(), "kernel": os.uname().release,
                        "load_average": os.getloadavg()},
            "versions": {"nginx": version(["nginx", "-v"]), "varnish": version(["varnishd", "-V"]),
                         "wrk": version(["wrk", "-v"]), "h2load": version(["h2load", "--version"])},
            "upstream_requests_while_measuring": upstream_during,
            "rows": result_rows, "h2": h2_results, "miss": miss_result, "notes": notes,
        }, f, indent=2)
    print(f"raw results: {args.json}")


if __name__ == "__main__":
    main()
