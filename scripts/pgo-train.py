#!/usr/bin/env python3
"""The workload that trains the profile-guided build (scripts/pgo.sh): the
instrumented binary serves, in front of the simulator on its fast clock
(examples/fanout_sim.rs: always in session, every quote moving), what a node
serves in a day, and writes its profile when it stops. Hits of small and large
answers, plain and compressed, over HTTP/1.1 and HTTP/2; misses of the three kinds
the miss floods ask (a news search, a CPI page, an unlisted code), a code asked a
second time; the quote stream to 1,500 subscribers for 8 s (trained with a
handful, the fan-out came out slower than the release build's); bad requests; the
admin pages. Standard library and h2load; about a minute."""

import argparse
import atexit
import os
import random
import selectors
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import harness
from harness import free_port

TOKEN = "pgo-token"
ADMIN_TOKEN = "pgo-admin"
START_WAIT = 60.0
STOP_WAIT = 30.0
SUBSCRIBERS = 1500
STREAM_SECS = 8.0

# Hits: each key asked once first (its miss), then again and again.
HITS = [
    ("/api/v1/stock/detail/600519", False),
    ("/api/v1/stock/list?codes=600519,000001,600036,000858,601318,600000,300750", False),
    ("/api/v1/stock/list?codes=600519,000001,600036,000858,601318,600000,300750", True),
    ("/api/v1/stock/kline?code=000001&period=week", True),
    ("/api/v1/stock/kline?code=600519&period=day", False),
    ("/api/v1/news/latest", False),
    ("/api/v1/macro/cpi", True),
]

# Misses: each request a key never asked (the load scripts' three kinds).
MISSES = {
    "news-search": lambda n: f"/api/v1/news/search?keyword=pgo{n}",
    "cpi-page": lambda n: f"/api/v1/macro/cpi?page={n % 100000 + 1}&pageSize={n // 100000 % 1000 + 1}",
    "unlisted-code": lambda n: f"/api/v1/stock/detail/{605000 + n}",
}

# Answered by mdproxy itself: a bad parameter, an unknown path, a malformed code.
ERRORS = [
    "/api/v1/stock/kline?code=000001&period=fortnight",
    "/api/v1/stock/nowhere",
    "/api/v1/stock/detail/12345x",
]


def h2load(port, targets, n, *, gzip=False, h2=False, token=True, clients=4):
    """`n` requests over `clients` connections, each connection asking the
    targets in turn (h2load's `-i`: a key is asked once only with one connection).
    Fails unless every request got an answer."""
    cmd = ["h2load", "-n", str(n), "-c", str(clients)]
    cmd += ["-m", "10"] if h2 else ["--h1"]
    if token:
        cmd += ["-H", f"Authorization: Bearer {TOKEN}"]
    if gzip:
        cmd += ["-H", "Accept-Encoding: gzip"]
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write("".join(f"http://127.0.0.1:{port}{t}\n" for t in targets))
    try:
        out = subprocess.run(cmd + ["-i", f.name], capture_output=True, text=True, timeout=600).stdout
    finally:
        os.unlink(f.name)
    line = next((l for l in out.splitlines() if l.startswith("requests:")), "")
    if f" {n} done" not in line:
        raise SystemExit(f"h2load: {line or out[-500:]}")


def stream(port, codes, n, seconds):
    """`n` quote subscribers of five codes each, read for `seconds`; the bytes
    they were sent."""
    sel = selectors.DefaultSelector()
    subs = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port))
        path = "/api/v1/stock/indicator/realtime/sse?codes=" + ",".join(random.sample(codes, 5))
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                  f"Authorization: Bearer {TOKEN}\r\nAccept: text/event-stream\r\n\r\n".encode())
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ)
        subs.append(s)
    got = 0
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        for key, _ in sel.select(timeout=left):
            try:
                got += len(key.fileobj.recv(65536))
            except BlockingIOError:
                pass
    for s in subs:
        s.close()
    return got


def config(path, port, admin_port, sim_port):
    with open(path, "w") as f:
        f.write(f"""[server]
listen = "127.0.0.1:{port}"
max_connections = {SUBSCRIBERS + 500}
max_connections_per_client_percent = 100
[admin]
listen = "127.0.0.1:{admin_port}"
token = "{ADMIN_TOKEN}"
[auth]
tokens = ["{TOKEN}"]
[upstream]
base_url = "http://127.0.0.1:{sim_port}/api/v1"
token = "up-token"
[limits]
upstream_rps = 0
[scheduler]
enabled = false
[log]
access = false
[hub]
session_interval_ms = 1000
closed_interval_ms = 1000
max_streams = {SUBSCRIBERS + 100}
max_streams_per_token = {SUBSCRIBERS + 100}
""")


def train(port, admin_port, codes, scale):
    """The workload; `scale` multiplies every count."""
    n = lambda k: max(1, int(k * scale))
    for path, gzip in HITS:
        print(f"hits {path}{' (gzip)' if gzip else ''}", flush=True)
        h2load(port, [path], n(20000), gzip=gzip)
        h2load(port, [path], n(10000), gzip=gzip, h2=True)
    for kind, target in MISSES.items():
        print(f"misses: {kind}", flush=True)
        asked = [target(i) for i in range(n(4000))]
        h2load(port, asked, len(asked), clients=1)
        if kind == "unlisted-code":
            # Asked again: the first asks move into the cache.
            h2load(port, asked[: n(1000)], n(1000), clients=1)
    print("bad requests", flush=True)
    h2load(port, ERRORS, n(3000))
    h2load(port, [HITS[0][0]], n(1000), token=False)
    subscribers = n(SUBSCRIBERS)
    print(f"the quote stream, {subscribers} subscribers for {STREAM_SECS:.0f} s", flush=True)
    got = stream(port, codes, subscribers, STREAM_SECS)
    if got < subscribers * 1000:
        raise SystemExit(f"the quote stream sent {got} bytes to {subscribers} subscribers")
    print("admin pages", flush=True)
    for path in ("/metrics", "/status", "/healthz", "/readyz"):
        h2load(admin_port, [path], n(200), token=False)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True, help="the instrumented mdproxy")
    ap.add_argument("--sim", required=True, help="examples/fanout_sim.rs, built")
    ap.add_argument("--profiles", required=True, help="where mdproxy writes its profile")
    ap.add_argument("--scale", type=float, default=1.0, help="multiplies every count")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="mdproxy-pgo-")
    atexit.register(shutil.rmtree, work, True)
    children = harness.script_children(work)
    sim_port, port, admin_port = free_port(), free_port(), free_port()
    codes_file = os.path.join(work, "codes.txt")
    sim = children.start("sim", [args.sim, "--listen", f"127.0.0.1:{sim_port}", "--token", "up-token",
                                 "--codes", "200", "--codes-out", codes_file])
    harness.wait_listening("sim", sim_port, sim, os.path.join(work, "sim.log"), START_WAIT)
    codes = open(codes_file).read().split()
    path = os.path.join(work, "mdproxy.toml")
    config(path, port, admin_port, sim_port)
    os.environ["LLVM_PROFILE_FILE"] = os.path.join(os.path.abspath(args.profiles), "serve-%p.profraw")
    md = children.start("mdproxy", [args.bin, "serve", "--config", path, "--log", "warn"])
    harness.wait_listening("mdproxy", port, md, os.path.join(work, "mdproxy.log"), START_WAIT)
    started = time.monotonic()
    train(port, admin_port, codes, args.scale)
    # A graceful stop: the profile is written when the process exits by itself.
    md.send_signal(signal.SIGTERM)
    code = md.wait(timeout=STOP_WAIT)
    if code != 0:
        tail = open(os.path.join(work, "mdproxy.log"), errors="replace").read()[-2000:]
        raise SystemExit(f"mdproxy exited with {code} after SIGTERM:\n{tail}")
    print(f"trained in {time.monotonic() - started:.0f} s", flush=True)


if __name__ == "__main__":
    main()
