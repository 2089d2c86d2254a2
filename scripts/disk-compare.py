#!/usr/bin/env python3
"""The disk tier beside nginx's disk cache, in one run (issue 28).

Started by scripts/disk-compare.sh, which installs the tools and builds the binary.
Puts mdproxy (memory `max_bytes` far below the working set, a disk tier under it)
and nginx `proxy_cache` (its cache on disk) in front of one simulator; fills both
with the same real K-line bodies (day, week and month bars, unadjusted and
backward-adjusted, of ranges that ended yesterday: final answers) until the working
set reaches its size; then, rounds interleaved, `wrk --latency` at random keys of the
whole set (disk hits for mdproxy: its memory holds a few percent) against mdproxy and
nginx, at the same keys against bare hyper serving mdproxy's own answers from memory
(examples/bare_hyper.rs: what any hyper server could do with these bodies), and at a
small hot set that fits in memory (memory hits) against mdproxy. mdproxy's RSS and
jemalloc's live and resident bytes are sampled through its disk rounds.
Checks the simulator saw no request while measuring and that the disk answered.
Then restarts mdproxy with `kill -9` a few times and times exec to its first answer
from disk. Reports ranges over rounds, RSS, and writes the figures as JSON. Every
file it writes lives under --dir and is deleted at the end. Standard library only."""

import argparse
import atexit
import concurrent.futures
import contextlib
import datetime
import gzip
import hashlib
import http.client
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

import harness
from harness import free_port

CLIENT_TOKEN = "load-token"
UPSTREAM_TOKEN = "sim-secret"
START_WAIT = 60.0
# Accept-Encoding of every request (--encoding); empty: none.
ACCEPT_ENCODING = ""
GIB = 1 << 30
MIB = 1 << 20
# Per code: (period, fqt); forward adjustment (`pre`) is never final, so not here.
SHAPES = [("day", "none"), ("week", "none"), ("day", "after"), ("month", "none"), ("week", "after")]

# The servers measured each round, in their first round's order.
ROUNDS = ["mdproxy disk", "nginx disk", "nginx sendfile", "bare hyper", "mdproxy memory"]
# The port (in `ports`) of each round that requests random keys of the whole set.
KEY_PORTS = {"mdproxy disk": "mdproxy", "nginx disk": "nginx", "nginx sendfile": "nginx-sendfile", "bare hyper": "bare"}
# Seconds of unmeasured load each server gets before the rounds.
WARM_UP_S = 3

processes = []
work = None


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def cleanup():
    global work
    for _, p in reversed(processes):
        if p.poll() is None:
            p.terminate()
    for _, p in reversed(processes):
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout=5)
    processes.clear()
    if work and not os.environ.get("KEEP"):
        shutil.rmtree(work, ignore_errors=True)
    work = None


def on_signal(signum, _frame):
    cleanup()
    sys.exit(128 + signum)


def start(name, argv):
    out = open(os.path.join(work, f"{name}.log"), "ab")
    p = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    processes.append((name, p))
    return p


def wait_listening(name, port, p):
    harness.wait_listening(name, port, p, os.path.join(work, f"{name}.log"), START_WAIT)


class Client:
    """One keep-alive connection."""

    def __init__(self, port):
        self.port = port
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)

    def get(self, target, token=CLIENT_TOKEN):
        headers = {"Authorization": f"Bearer {token}"}
        if ACCEPT_ENCODING:
            headers["Accept-Encoding"] = ACCEPT_ENCODING
        for attempt in range(2):
            try:
                self.conn.request("GET", target, headers=headers)
                r = self.conn.getresponse()
                return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
            except (http.client.HTTPException, OSError):
                self.conn.close()
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
                if attempt:
                    raise


def status_json(port):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("GET", "/status.json")
    return json.loads(c.getresponse().read())


def heap_mib(admin_port):
    """jemalloc's live and resident bytes from the metrics, in MiB (empty without jemalloc)."""
    c = http.client.HTTPConnection("127.0.0.1", admin_port, timeout=10)
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    out = {}
    for name in ("allocated", "resident"):
        m = re.search(rf"^mdproxy_heap_{name}_bytes (\d+)", text, re.M)
        if m:
            out[name] = int(m.group(1)) / MIB
    return out


class Sampler:
    """Polls mdproxy's RSS and jemalloc's live and resident bytes every 100 ms while
    a round runs: the peak of each, and so what the peak RSS was made of; every
    sample too (seconds into the round, RSS, live, resident), for results.json."""

    def __init__(self, pid, admin_port):
        self.pid, self.admin_port = pid, admin_port
        self.peak = {"rss": 0.0, "allocated": 0.0, "resident": 0.0, "rss_at_peak_allocated": 0.0}
        self.samples = []
        self.started = time.monotonic()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self):
        while not self.stop.wait(0.1):
            try:
                rss = rss_mib(self.pid).get("VmRSS", 0)
                heap = heap_mib(self.admin_port)
            except (OSError, http.client.HTTPException, ValueError):
                continue
            self.samples.append([round(time.monotonic() - self.started, 2), round(rss, 1),
                                 round(heap.get("allocated", 0), 1), round(heap.get("resident", 0), 1)])
            if heap.get("allocated", 0) > self.peak["allocated"]:
                self.peak["rss_at_peak_allocated"] = rss
            self.peak["rss"] = max(self.peak["rss"], rss)
            for k in ("allocated", "resident"):
                self.peak[k] = max(self.peak[k], heap.get(k, 0))

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *_):
        self.stop.set()
        self.thread.join(timeout=5)


def sim_total(sim_port):
    c = http.client.HTTPConnection("127.0.0.1", sim_port, timeout=10)
    c.request("GET", "/_sim/stats")
    return json.loads(c.getresponse().read())["total"]


def rss_mib(pid):
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:")):
                out[line.split(":")[0]] = int(line.split()[1]) / 1024
    return out


def usage(pids):
    """CPU seconds (user and system) and minor page faults of `pids` and their
    children (nginx's workers)."""
    tick = os.sysconf("SC_CLK_TCK")
    every = set(pids)
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) in pids:
                        every.add(int(entry))
            except (OSError, ValueError, IndexError):
                pass
    ticks = faults = 0
    for pid in every:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            # After the name: state ppid ... minflt (10th field) ... utime stime.
            ticks += int(fields[11]) + int(fields[12])
            faults += int(fields[7])
        except (OSError, ValueError, IndexError):
            pass
    return ticks / tick, faults


def du_mib(path):
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
            except OSError:
                pass
    return total / MIB


def stock_codes(sim_port):
    """Every A-share code the simulator knows (its screener, page by page)."""
    codes = []
    for page in range(1, 100):
        c = http.client.HTTPConnection("127.0.0.1", sim_port, timeout=30)
        c.request("GET", f"/api/v1/stock/screener/universe?market=CN_A&page={page}&pageSize=500",
                  headers={"Authorization": f"Bearer {UPSTREAM_TOKEN}"})
        items = json.loads(c.getresponse().read())["data"]["items"]
        if not items:
            break
        codes += [i["code"] for i in items]
    return codes


def targets(codes):
    yesterday = (datetime.date.today() - datetime.timedelta(days=1)).isoformat()
    codes = list(codes)
    random.Random(28).shuffle(codes)
    for period, fqt in SHAPES:
        for code in codes:
            yield f"/api/v1/stock/kline?code={code}&period={period}&fqt={fqt}&to={yesterday}"


def mdproxy_config(path, port, admin_port, sim_port, disk_dir, args):
    with open(path, "w") as f:
        f.write(f"""[server]
listen = "127.0.0.1:{port}"
[admin]
listen = "127.0.0.1:{admin_port}"
[auth]
tokens = ["{CLIENT_TOKEN}"]
[upstream]
base_url = "http://127.0.0.1:{sim_port}/api/v1"
token = "{UPSTREAM_TOKEN}"
# No start-up probe: the restarts below must ask the simulator nothing.
probe_target = ""
[limits]
upstream_rps = 0
[scheduler]
enabled = false
[cache]
max_bytes = {args.max_mib * MIB}
disk_path = "{disk_dir}"
disk_bytes = {args.disk_mib * MIB}
""")


def nginx_config(path, port, sendfile_port, sim_port, cache_dir, args):
    """One nginx, one cache zone, two servers: `sendfile off` (nginx's default:
    it reads the cache file into its buffers and writes them) and `sendfile on`
    (Debian's nginx.conf and most operators: the kernel sends the file's pages,
    no copy through nginx). Debian also sets `tcp_nopush on`; with it, over
    loopback and keep-alive, nginx fell to about 4,000 req/s with a p99 of 46 ms
    (a corked last segment waiting out the delayed ACK), so it is off: nginx at
    its best. With --encoding, nginx compresses each answer (`gzip on`, its
    default level 1), as an operator serving JSON to browsers sets it; sendfile
    then has nothing to send."""
    d = os.path.dirname(path)
    gzip = "\n  gzip on;\n  gzip_types application/json;" if ACCEPT_ENCODING else ""
    location = f"""
    location /api/v1/ {{
      proxy_pass http://sim;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Authorization "Bearer {UPSTREAM_TOKEN}";
      proxy_set_header Accept-Encoding "";
      proxy_buffers 64 16k;
      proxy_cache md;
      proxy_cache_key $uri$is_args$args;
      proxy_cache_valid 200 7d;
      proxy_ignore_headers Cache-Control Expires Set-Cookie X-Accel-Expires;
      proxy_cache_lock on;
      add_header X-Cache $upstream_cache_status;
    }}"""
    with open(path, "w") as f:
        f.write(harness.nginx_head(d) + f"""http {{
  access_log off;{gzip}
  proxy_cache_path {cache_dir} levels=1:2 keys_zone=md:64m max_size={args.disk_mib}m inactive=7d use_temp_path=off;
  upstream sim {{ server 127.0.0.1:{sim_port}; keepalive 64; }}
  server {{
    listen 127.0.0.1:{port};
    sendfile off;{location}
  }}
  server {{
    listen 127.0.0.1:{sendfile_port};
    sendfile on;
    tcp_nopush off;{location}
  }}
}}
""")


def bare_name(key):
    return hashlib.sha1(key.encode()).hexdigest()[:20]


def save_answer(save, key, headers, body, suffix=""):
    """Writes one answer as examples/bare_hyper.rs reads it (NAME.body, NAME.headers)."""
    name = bare_name(key) + suffix
    with open(os.path.join(save, f"{name}.body"), "wb") as f:
        f.write(body)
    with open(os.path.join(save, f"{name}.headers"), "w") as f:
        f.write("HTTP/1.1 200 OK\r\n")
        for k, v in headers.items():
            f.write(f"{k}: {v}\r\n")
        f.write("\r\n")


def fill(port, keys, threads=4, save=None):
    """GETs every key once (in `threads` connections); returns body bytes (of the
    identity body: a compressed answer is counted as what it decompresses to).
    With `save`, writes each answer there for bare hyper (its identity one, and
    the gzip one as the client got it)."""
    def one(chunk):
        c = Client(port)
        n = 0
        for k in chunk:
            status, headers, body = c.get(k)
            if status != 200:
                raise SystemExit(f"fill {k}: {status} {body[:200]!r}")
            if headers.get("content-encoding") == "gzip":
                if save:
                    save_answer(save, k, headers, body, ".gz")
                body = gzip.decompress(body)
                headers = {h: v for h, v in headers.items() if h != "content-encoding"}
            if save:
                save_answer(save, k, headers, body)
            n += len(body)
        return n
    chunks = [keys[i::threads] for i in range(threads)]
    with concurrent.futures.ThreadPoolExecutor(threads) as ex:
        return sum(ex.map(one, chunks))


# `seed` is a global: `thread:set` sets a thread's globals, so each wrk thread draws
# its own keys. (Until run 9 it was a local, both threads drew the same sequence
# of keys, and one thread's requests found the keys the other had just read.)
WRK_LUA = """
local paths = {{}}
for line in io.lines("{file}") do paths[#paths + 1] = line end
seed = {seed}
function setup(thread) seed = seed + 7919; thread:set("seed", seed) end
function init(args) math.randomseed(seed) end
function request() return wrk.format("GET", paths[math.random(#paths)]) end
"""


def run_wrk(port, keys_file, args, label):
    script = os.path.join(work, f"wrk-{label}-{random.randrange(1 << 30)}.lua")
    with open(script, "w") as f:
        f.write(WRK_LUA.format(file=keys_file, seed=random.randrange(1 << 20)))
    cmd = ["wrk", f"-t{args.threads}", f"-c{args.connections}", f"-d{args.duration}s", "--latency",
           "-H", f"Authorization: Bearer {CLIENT_TOKEN}", "-s", script, f"http://127.0.0.1:{port}/"]
    if ACCEPT_ENCODING:
        cmd[-1:-1] = ["-H", f"Accept-Encoding: {ACCEPT_ENCODING}"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=args.duration + 60).stdout
    result = {"rps": None, "p50_ms": None, "p99_ms": None, "mib_s": None, "errors": 0, "non_2xx": 0}
    m = re.search(r"Requests/sec:\s+([\d.]+)", out)
    if m:
        result["rps"] = float(m.group(1))
    m = re.search(r"Transfer/sec:\s+([\d.]+)(\w+)", out)
    if m:
        scale = {"B": 1 / MIB, "KB": 1 / 1024, "MB": 1, "GB": 1024}.get(m.group(2), 1)
        result["mib_s"] = float(m.group(1)) * scale
    for pct, key in (("50", "p50_ms"), ("99", "p99_ms")):
        m = re.search(rf"^\s+{pct}%\s+([\d.]+)(us|ms|s)", out, re.M)
        if m:
            result[key] = float(m.group(1)) * {"us": 0.001, "ms": 1, "s": 1000}[m.group(2)]
    m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    if m:
        result["errors"] = sum(int(x) for x in m.groups())
    m = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if m:
        result["non_2xx"] = int(m.group(1))
    if result["rps"] is None:
        log(f"wrk gave no rate for {label}:\n{out}")
    return result


def start_mdproxy(args, cfg, port):
    p = start("mdproxy", [args.bin, "serve", "--config", cfg, "--log", "warn"])
    wait_listening("mdproxy", port, p)
    return p


def spread(xs, fmt="{:.0f}"):
    xs = [x for x in xs if x is not None]
    if not xs:
        return "-"
    lo, hi = min(xs), max(xs)
    return fmt.format(lo) if lo == hi else f"{fmt.format(lo)}–{fmt.format(hi)}"


def main():
    global work
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--bare", required=True, help="examples/bare_hyper: the same answers from memory")
    ap.add_argument("--dir", required=True, help="work directory (deleted at the end)")
    ap.add_argument("--working-set-mib", type=int, default=3072)
    ap.add_argument("--max-mib", type=int, default=64)
    ap.add_argument("--disk-mib", type=int, default=4096)
    ap.add_argument("--hot", type=int, default=48, help="keys of the memory-hit set")
    ap.add_argument("--duration", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--restarts", type=int, default=3)
    ap.add_argument("--connections", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", required=True)
    ap.add_argument("--only", default="", help="comma-separated rounds to run (a quick look; ratios need all)")
    ap.add_argument("--profile", help="perf record -g mdproxy during each disk round, to this file "
                                      "and a suffix .N for round N past the first")
    ap.add_argument("--encoding", default="",
                    help="Accept-Encoding of every request (fills and rounds), e.g. gzip: clients that "
                         "compress; empty: none, as the upstream's bodies")
    args = ap.parse_args()
    global ACCEPT_ENCODING
    ACCEPT_ENCODING = args.encoding
    rounds = args.only.split(",") if args.only else ROUNDS
    unknown = [name for name in rounds if name not in ROUNDS]
    if unknown:
        raise SystemExit(f"--only: unknown rounds {unknown}; of {ROUNDS}")

    os.makedirs(os.path.dirname(os.path.abspath(args.dir)), exist_ok=True)
    free = shutil.disk_usage(os.path.dirname(os.path.abspath(args.dir))).free
    need = 3 * args.working_set_mib * MIB + 4 * GIB
    if free < need:
        raise SystemExit(f"{free / GIB:.1f} GiB free; this run needs {need / GIB:.1f} GiB (WORKING_SET_MIB is smaller)")
    work = os.path.abspath(args.dir)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    atexit.register(cleanup)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    ports = {name: free_port() for name in ("sim", "mdproxy", "admin", "nginx", "nginx-sendfile", "bare")}
    sim = start("sim", [args.bin, "sim", "--listen", f"127.0.0.1:{ports['sim']}", "--token", UPSTREAM_TOKEN, "--log", "warn"])
    wait_listening("sim", ports["sim"], sim)
    cfg = os.path.join(work, "mdproxy.toml")
    disk_dir = os.path.join(work, "mdproxy-disk")
    mdproxy_config(cfg, ports["mdproxy"], ports["admin"], ports["sim"], disk_dir, args)
    md = start_mdproxy(args, cfg, ports["mdproxy"])
    ncfg = os.path.join(work, "nginx.conf")
    nginx_dir = os.path.join(work, "nginx-cache")
    nginx_config(ncfg, ports["nginx"], ports["nginx-sendfile"], ports["sim"], nginx_dir, args)
    ng = start("nginx", ["nginx", "-c", ncfg, "-p", work])
    wait_listening("nginx", ports["nginx"], ng)

    # Fill mdproxy key by key until the working set is reached, in batches.
    keys, filled, started = [], 0, time.monotonic()
    codes = stock_codes(ports["sim"])
    log(f"simulator: {len(codes)} A-share codes")
    gen = targets(codes)
    bare_dir = os.path.join(work, "bare")
    os.makedirs(bare_dir)
    while filled < args.working_set_mib * MIB:
        batch = [k for _, k in zip(range(200), gen)]
        if not batch:
            break
        filled += fill(ports["mdproxy"], batch, save=bare_dir)
        keys += batch
    md_fill_s = time.monotonic() - started
    log(f"working set: {len(keys)} K-lines, {filled / MIB:.0f} MiB, mean {filled / len(keys) / 1024:.0f} KiB; "
        f"mdproxy filled it in {md_fill_s:.0f} s")
    started = time.monotonic()
    fill(ports["nginx"], keys)
    nginx_fill_s = time.monotonic() - started
    # Let mdproxy's writer catch up (the status page counts its writes).
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        disk = status_json(ports["admin"])["disk"]
        if disk["writes"] + disk["dropped"]["queue_full"] + disk["dropped"]["too_large"] >= len(keys):
            break
        time.sleep(1)
    disk = status_json(ports["admin"])["disk"]
    log(f"mdproxy RSS after the fill: {rss_mib(md.pid)}")
    log(f"mdproxy disk: {disk['writes']} records, {disk['bytes'] / MIB:.0f} MiB; dropped {disk['dropped']}; "
        f"nginx cache {du_mib(nginx_dir):.0f} MiB")

    # Bare hyper serves mdproxy's answers (the same bytes and headers) from memory:
    # the most any hyper server can do with these bodies, and no disk at all.
    with open(os.path.join(bare_dir, "index"), "w") as f:
        f.write("".join(f"{bare_name(k)}\t{k}\n" for k in keys))
    bare = start("bare", [args.bare, "--listen", f"127.0.0.1:{ports['bare']}", "--dir", bare_dir, "--http1-only"])
    wait_listening("bare", ports["bare"], bare)
    keys_file = os.path.join(work, "keys.txt")
    with open(keys_file, "w") as f:
        f.write("\n".join(keys) + "\n")
    hot = keys[: args.hot]
    hot_file = os.path.join(work, "hot.txt")
    with open(hot_file, "w") as f:
        f.write("\n".join(hot) + "\n")
    hot_bytes = fill(ports["mdproxy"], hot, threads=1)
    log(f"hot set: {len(hot)} keys, {hot_bytes / MIB:.0f} MiB (memory: {args.max_mib} MiB)")
    # The fill left three copies of the working set (mdproxy's blocks, nginx's files,
    # bare hyper's) as dirty pages: written back now, not during the first rounds
    # (it took 0.0-0.5 s in run 9: the kernel had written most already).
    started = time.monotonic()
    os.sync()
    log(f"dirty pages written back in {time.monotonic() - started:.1f} s")

    sim_before = sim_total(ports["sim"])
    runs = {name: [] for name in rounds}
    order = list(runs)
    # Each server serves the random keys for a few seconds, unmeasured, before the
    # rounds: the first measured round after the fill no longer falls on whichever
    # server the rotation puts first (mdproxy's disk hits). The memory round warms
    # itself (its hot set is filled before each round).
    # mdproxy's memory is sampled there too: its first disk reads after the fill are
    # part of the RSS it needs, measured or not.
    warm_args = argparse.Namespace(**{**vars(args), "duration": WARM_UP_S})
    warm_up = None
    for name in (n for n in order if n in KEY_PORTS):
        sampled = name == "mdproxy disk"
        with Sampler(md.pid, ports["admin"]) if sampled else contextlib.nullcontext() as sampler:
            run_wrk(ports[KEY_PORTS[name]], keys_file, warm_args, "warm")
        if sampled:
            warm_up = {"peak_mib": sampler.peak, "memory_samples_mib": sampler.samples}
    log(f"warm-up: {WARM_UP_S} s of random keys per server, not measured; "
        f"mdproxy's memory then {warm_up and warm_up['peak_mib']}")
    server_pids = {"mdproxy disk": [md.pid], "mdproxy memory": [md.pid], "nginx disk": [ng.pid],
                   "nginx sendfile": [ng.pid], "bare hyper": [bare.pid]}
    for r in range(args.rounds):
        for name in order[r % len(order):] + order[: r % len(order)]:
            cpu_before, faults_before = usage(server_pids[name])
            if name == "mdproxy memory":
                fill(ports["mdproxy"], hot, threads=1)
                result = run_wrk(ports["mdproxy"], hot_file, args, "hot")
            elif name == "mdproxy disk":
                before = status_json(ports["admin"])
                perf = None
                if args.profile:
                    out = args.profile if r == 0 else f"{args.profile}.{r + 1}"
                    perf = subprocess.Popen(["perf", "record", "-g", "-o", out, "-p", str(md.pid),
                                             "--", "sleep", str(args.duration)],
                                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                with Sampler(md.pid, ports["admin"]) as sampler:
                    result = run_wrk(ports["mdproxy"], keys_file, args, "md")
                if perf:
                    perf.wait(timeout=60)
                result["peak_mib"] = sampler.peak
                result["memory_samples_mib"] = sampler.samples
                after = status_json(ports["admin"])
                # The rest of the requests were memory hits (the simulator counts none).
                result["disk_hits"] = after["disk"]["hits"] - before["disk"]["hits"]
                result["requests"] = after["requests"]["total"] - before["requests"]["total"]
                result["evictions"] = after["cache"]["evictions"] - before["cache"]["evictions"]
                result["entries"] = after["cache"]["entries"]
                # How the engine read them: in place from the page cache, or by
                # its threads (src/cache/disk/io.rs).
                result["engine_reads"] = {
                    path: after["disk"]["engine_reads"][path] - before["disk"]["engine_reads"][path]
                    for path in ("page_cache", "pool")
                }
            else:
                result = run_wrk(ports[KEY_PORTS[name]], keys_file, args, KEY_PORTS[name])
            # The server's own CPU per request (its workers' user and system time):
            # what a request costs it, whoever else shares the machine's two cores.
            # Its minor page faults too: fresh pages for buffers cost a disk hit a
            # fault and a cleared page each.
            served = (result["rps"] or 0) * args.duration
            cpu_after, faults_after = usage(server_pids[name])
            result["cpu_us"] = (cpu_after - cpu_before) * 1e6 / served if served else None
            # At least 0: a child that exits between the readings (nginx's cache
            # loader) takes its count with it.
            result["faults"] = max(faults_after - faults_before, 0) / served if served else None
            runs[name].append(result)
            shown = {k: v for k, v in result.items() if k != "memory_samples_mib"}
            log(f"round {r + 1} {name}: {shown}; mdproxy RSS {rss_mib(md.pid)}")
    sim_after = sim_total(ports["sim"])
    rss = rss_mib(md.pid)
    heap = heap_mib(ports["admin"])
    cache_mib = status_json(ports["admin"])["cache"]["bytes"] / MIB

    # Restarts: kill -9, then exec to the first answer from disk (a key not in
    # memory before the kill: there is no memory after it).
    restarts = []
    for i in range(args.restarts):
        md.send_signal(signal.SIGKILL)
        md.wait(timeout=10)
        key = keys[len(keys) // 2 + i]
        t0 = time.monotonic()
        md = start("mdproxy", [args.bin, "serve", "--config", cfg, "--log", "warn"])
        c = None
        while time.monotonic() - t0 < START_WAIT:
            try:
                c = Client(ports["mdproxy"])
                status, headers, _ = c.get(key)
                break
            except OSError:
                time.sleep(0.005)
        first_ms = (time.monotonic() - t0) * 1e3
        cs = headers.get("cache-status", "")
        open_ms = status_json(ports["admin"])["disk"]["open_ms"]
        restarts.append({"first_hit_ms": first_ms, "status": status, "cache_status": cs, "engine_open_ms": open_ms})
        log(f"restart {i + 1}: first answer after {first_ms:.0f} ms ({status}, {cs}); engine opened in {open_ms} ms")
    sim_restart = sim_total(ports["sim"])

    print()
    print(f"Working set {len(keys)} K-lines, {filled / MIB:.0f} MiB (mean {filled / len(keys) / 1024:.0f} KiB); "
          f"mdproxy max_bytes {args.max_mib} MiB, disk_bytes {args.disk_mib} MiB; "
          f"wrk -t{args.threads} -c{args.connections} -d{args.duration}s, {args.rounds} rounds interleaved; "
          f"Accept-Encoding: {ACCEPT_ENCODING or 'none'}")
    print(f"{'':18} {'req/s':>14} {'MiB/s':>12} {'p50 ms':>12} {'p99 ms':>14}")
    for name, rs in runs.items():
        print(f"{name:18} {spread([x['rps'] for x in rs]):>14} {spread([x['mib_s'] for x in rs]):>12} "
              f"{spread([x['p50_ms'] for x in rs], '{:.2f}'):>12} {spread([x['p99_ms'] for x in rs], '{:.2f}'):>14}")
    for name, ref in (("mdproxy disk", "nginx disk"), ("mdproxy disk", "nginx sendfile"),
                      ("mdproxy disk", "bare hyper"), ("nginx sendfile", "bare hyper")):
        if name not in runs or ref not in runs:
            continue
        ratios = [a["rps"] / b["rps"] for a, b in zip(runs[name], runs[ref]) if a["rps"] and b["rps"]]
        print(f"{name} / {ref} by round: {' / '.join(f'{x:.2f}' for x in ratios)}")
    for name, rs in runs.items():
        cpu = [x["cpu_us"] for x in rs if x.get("cpu_us")]
        if cpu:
            print(f"{name} CPU per request (µs, by round): {' / '.join(f'{x:.0f}' for x in cpu)}")
        faults = [x["faults"] for x in rs if x.get("faults") is not None]
        if faults:
            print(f"{name} minor page faults per request (by round): {' / '.join(f'{x:.2f}' for x in faults)}")
    reads = [x["engine_reads"] for x in runs.get("mdproxy disk", []) if "engine_reads" in x]
    if reads:
        in_place = sum(r["page_cache"] for r in reads)
        total = in_place + sum(r["pool"] for r in reads)
        print(f"mdproxy disk engine reads: {in_place} of {total} in place from the page cache "
              f"({in_place / max(total, 1):.1%}), the rest by the engine's threads")
    print(f"mdproxy RSS {rss.get('VmRSS', 0):.0f} MiB (peak {rss.get('VmHWM', 0):.0f} MiB); "
          f"goal ≤ 1.25 × {args.max_mib} + 64 MiB + the engine's index")
    peaks = [x["peak_mib"] for x in runs.get("mdproxy disk", []) if "peak_mib" in x]
    if peaks:
        print(f"  in the disk rounds (sampled every 100 ms): RSS up to {spread([p['rss'] for p in peaks])} MiB, "
              f"jemalloc live up to {spread([p['allocated'] for p in peaks])} MiB "
              f"(RSS then {spread([p['rss_at_peak_allocated'] for p in peaks])}), "
              f"resident up to {spread([p['resident'] for p in peaks])} MiB")
    if warm_up:
        p = warm_up["peak_mib"]
        print(f"  in the warm-up (the first disk reads after the fill): RSS up to {p['rss']:.0f} MiB, "
              f"jemalloc live up to {p['allocated']:.0f} MiB, resident up to {p['resident']:.0f} MiB")
    print(f"  of which: the memory cache weighs {cache_mib:.0f} MiB; jemalloc: {heap.get('allocated', 0):.0f} MiB "
          f"live, {heap.get('resident', 0):.0f} MiB resident")
    print(f"restart to first disk hit: {spread([x['first_hit_ms'] for x in restarts])} ms "
          f"(engine open {spread([x['engine_open_ms'] for x in restarts])} ms)")
    print(f"simulator requests while measuring: {sim_after - sim_before}, during restarts: {sim_restart - sim_after}")
    errors = sum(x["errors"] + x["non_2xx"] for rs in runs.values() for x in rs)
    print(f"wrk errors and non-2xx: {errors}")
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump({
            "working_set": {"keys": len(keys), "mib": filled / MIB},
            "accept_encoding": ACCEPT_ENCODING,
            "fill_s": {"mdproxy": md_fill_s, "nginx": nginx_fill_s},
            "runs": runs, "warm_up": warm_up, "rss_mib": rss, "heap_mib": heap, "cache_mib": cache_mib, "restarts": restarts,
            "disk": disk, "nginx_cache_mib": du_mib(nginx_dir),
            "sim_requests_while_measuring": sim_after - sim_before,
            "sim_requests_during_restarts": sim_restart - sim_after,
            "args": vars(args),
        }, f, indent=1)
    if sim_after != sim_before or errors:
        raise SystemExit("the simulator was asked while measuring, or requests failed")


if __name__ == "__main__":
    main()
