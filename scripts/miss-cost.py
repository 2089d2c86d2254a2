#!/usr/bin/env python3
"""Instructions per cache miss of the release binary (callgrind), issue 44's first
measure: what one miss costs mdproxy in user space, the upstream client's work
included, the simulator's not. A load run on this shared machine moves by a
quarter; this count does not, so it shows what a change to the miss path saves.

Three kinds of misses, each request a key never asked before: a news search with a
new keyword (200, about 10 KB), a CPI page never asked (200, mostly 58 B), and an
unlisted code (the upstream's 404). For each: a warm-up of other new keys,
callgrind's counters zeroed, N misses over one keep-alive connection (h2load
--h1 reading its targets from a file), a dump; the total over N is the figure.

The anchor, counted the same way in the same run: nginx in front of the same
simulator as the load scripts configure it (`harness.nginx_proxy_cache`: its cache
on tmpfs, keep-alive to the upstream), as one process under callgrind. It relays
the 404 and keeps the 200s; callgrind counts user space only, so the kernel's
work on nginx's cache files is not in its figure.

With --copies, mdproxy runs without callgrind, with scripts/memcpy-census.c
preloaded: the bytes memcpy copies a miss (futures moved whole, bodies, heads),
by call site, the largest named by addr2line (with file and line when the binary
has line tables).
Started by scripts/miss-cost.sh. Standard library, h2load, valgrind and nginx."""

import argparse
import atexit
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time

import harness
from harness import free_port

TOKEN = "load-token"
START_WAIT = 120.0
KINDS = {
    "news-search": lambda i: f"/api/v1/news/search?keyword=miss{i}",
    "cpi-page": lambda i: f"/api/v1/macro/cpi?page={1000 + i}&pageSize=20",
    "unlisted-code": lambda i: f"/api/v1/stock/detail/{605000 + i}",
    # The news search asked as browsers and Python's requests ask (keys of its own:
    # the coding is not part of the key).
    "news-search-gz": lambda i: f"/api/v1/news/search?keyword=gzmiss{i}",
}
# Headers a kind's requests carry beside the token.
HEADERS = {"news-search-gz": ["Accept-Encoding: gzip"]}


def h2load(port, work, targets, headers=()):
    path = os.path.join(work, "targets.txt")
    with open(path, "w") as f:
        f.writelines(f"http://127.0.0.1:{port}{t}\n" for t in targets)
    # One connection: h2load's clients each walk the whole list, so with several
    # every key would be asked once per client (one miss, then waits and hits).
    cmd = ["h2load", "--h1", "-n", str(len(targets)), "-c", "1", "-i", path,
           "-H", f"Authorization: Bearer {TOKEN}"]
    for header in headers:
        cmd += ["-H", header]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=3600).stdout
    line = next((l for l in out.splitlines() if l.startswith("requests:")), "")
    # Every request answered (a 4xx the upstream gives counts as answered).
    if f"{len(targets)} done" not in line or "0 errored, 0 timeout" not in line:
        raise SystemExit(f"h2load: {line or out[-500:]}")
    codes = next((l for l in out.splitlines() if l.startswith("status codes:")), "")
    return codes


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--anchors", default="nginx",
                    help="nginx, relay (examples/bare_relay), raw (the same with --raw), or empty: mdproxy alone")
    ap.add_argument("--relay", default="target/release/examples/bare_relay")
    ap.add_argument("--max-mib", type=int, default=0,
                    help="mdproxy's cache.max_bytes in MiB (0: its default): small, so that "
                         "the warm-up fills it and every counted miss evicts, as on a busy node")
    ap.add_argument("--warm", type=int, default=0,
                    help="misses of other new keys before counting (0: a fifth of --requests, "
                         "at least 200); enough to fill --max-mib")
    ap.add_argument("--copies", action="store_true",
                    help="count memcpy's calls and bytes a miss by call site instead "
                         "(mdproxy alone, scripts/memcpy-census.c preloaded)")
    args = ap.parse_args()
    kinds = [k for k in args.kinds.split(",") if k]
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        raise SystemExit(f"unknown kinds {unknown}; known: {', '.join(KINDS)}")
    work = tempfile.mkdtemp(prefix="mdproxy-miss-cost-")
    if os.environ.get("KEEP"):
        print(f"the callgrind dumps stay in {work} (callgrind_annotate them)", flush=True)
    else:
        atexit.register(shutil.rmtree, work, True)
    children = harness.script_children(work)
    sim_port, md_port = free_port(), free_port()
    sim = children.start("sim", [args.bin, "sim", "--listen", f"127.0.0.1:{sim_port}",
                              "--token", "up-token", "--log", "warn"])
    harness.wait_listening("sim", sim_port, sim, os.path.join(work, "sim.log"), START_WAIT)
    config = os.path.join(work, "mdproxy.toml")
    with open(config, "w") as f:
        f.write(f"""[server]
listen = "127.0.0.1:{md_port}"
[auth]
tokens = ["{TOKEN}"]
[upstream]
base_url = "http://127.0.0.1:{sim_port}/api/v1"
token = "up-token"
probe_target = ""
[limits]
upstream_rps = 0
[scheduler]
enabled = false
[log]
access = false
""")
        if args.max_mib:
            f.write(f"[cache]\nmax_bytes = {args.max_mib * 1024 * 1024}\n")
    servers = {"mdproxy": (md_port, [args.bin, "serve", "--config", config, "--log", "warn"])}
    if args.copies:
        return copies(args, kinds, children, work, md_port, servers["mdproxy"][1])
    if "nginx" in args.anchors.split(","):
        nginx_port = free_port()
        cache_dir = tempfile.mkdtemp(prefix="miss-cost-nginx-", dir="/dev/shm")
        atexit.register(shutil.rmtree, cache_dir, True)
        nginx_conf = os.path.join(work, "nginx.conf")
        harness.nginx_proxy_cache(nginx_conf, nginx_port, sim_port, cache_dir, "up-token", single=True)
        servers["nginx"] = (nginx_port, ["nginx", "-c", nginx_conf, "-p", work])
    # The two relays are one example: `raw` is it with --raw (no hyper).
    for name in ("relay", "raw"):
        if name in args.anchors.split(","):
            port = free_port()
            servers[name] = (port, [args.relay, *(["--raw"] if name == "raw" else []),
                                    "--listen", f"127.0.0.1:{port}",
                                    "--upstream", f"127.0.0.1:{sim_port}", "--token", "up-token"])
    pids = {}
    for name, (port, argv) in servers.items():
        out = os.path.join(work, f"callgrind.{name}")
        p = children.start(name, ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", *argv])
        harness.wait_listening(name, port, p, os.path.join(work, f"{name}.log"), START_WAIT)
        pids[name] = p.pid
    n = args.requests
    print(f"callgrind, {n} misses a figure (each a key never asked) over one keep-alive "
          "connection (h2load --h1), each server's user-space instructions only", flush=True)
    print(f"{'miss':16} " + " ".join(f"{name:>12}" for name in servers)
          + "".join(f"  md/{a:5}" for a in ("nginx", "relay", "raw") if a in servers) + "  statuses")
    warm = args.warm or max(n // 5, 200)
    for kind in kinds:
        target, headers = KINDS[kind], HEADERS.get(kind, ())
        per, statuses = {}, ""
        for name, (port, _) in servers.items():
            h2load(port, work, [target(j) for j in range(warm)], headers)
            harness.callgrind_control(pids[name], "-z")
            codes = h2load(port, work, [target(warm + j) for j in range(n)], headers)
            harness.callgrind_control(pids[name], "-d")
            per[name] = harness.callgrind_total(os.path.join(work, f"callgrind.{name}")) / n
            codes = codes.split(":", 1)[1].strip()
            # Both servers answer alike, or the figures count different work.
            if statuses and codes != statuses:
                raise SystemExit(f"{kind}: {name} answered {codes}, mdproxy {statuses}")
            statuses = codes
        ratio = "".join(f"  {per['mdproxy'] / per[a]:8.2f}" for a in ("nginx", "relay", "raw") if a in per)
        print(f"{kind:16} " + " ".join(f"{per[name]:12.0f}" for name in servers)
              + f"{ratio}  {statuses}", flush=True)


def copies(args, kinds, children, work, port, argv):
    """--copies: memcpy's calls and bytes a miss, and the largest call sites."""
    census = os.path.join(work, "memcpy-census.so")
    here = os.path.dirname(os.path.abspath(__file__))
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", census,
                    os.path.join(here, "memcpy-census.c"), "-ldl"], check=True)
    out = os.path.join(work, "census.txt")
    p = children.start("mdproxy", argv, env={"LD_PRELOAD": census, "MEMCPY_CENSUS_OUT": out})
    harness.wait_listening("mdproxy", port, p, os.path.join(work, "mdproxy.log"), START_WAIT)
    n, warm = args.requests, args.warm or max(args.requests // 5, 200)
    for kind in kinds:
        target, headers = KINDS[kind], HEADERS.get(kind, ())
        h2load(port, work, [target(j) for j in range(warm)], headers)
        if os.path.exists(out):
            os.remove(out)
        os.kill(p.pid, signal.SIGUSR2)
        codes = h2load(port, work, [target(warm + j) for j in range(n)], headers)
        os.kill(p.pid, signal.SIGUSR2)
        for _ in range(100):
            if os.path.exists(out) and os.path.getsize(out) > 0:
                break
            time.sleep(0.1)
        time.sleep(0.2)
        rows = []
        with open(out) as f:
            for line in f:
                c, b, offset, obj = line.split(maxsplit=3)
                rows.append((int(c), int(b), offset, obj.strip()))
        total_calls, total_bytes = sum(r[0] for r in rows), sum(r[1] for r in rows)
        print(f"{kind}: {total_bytes / n:.0f} bytes a miss in {total_calls / n:.1f} memcpy calls "
              f"({codes.split(':', 1)[1].strip()})", flush=True)
        for c, b, offset, obj in sorted(rows, key=lambda r: -r[1])[:12]:
            where = subprocess.run(["addr2line", "-f", "-C", "-i", "-e", obj, hex(int(offset, 16) - 1)],
                                   capture_output=True, text=True).stdout.splitlines()
            lines = [re.sub(r"^.*/(library|registry/src/[^/]+|crates)/", "", l.split(" ")[0])
                     for l in where[1::2]]
            print(f"  {b / n:7.0f} B {c / n:5.1f} calls  {where[0][:70] if where else '?'}"
                  f"  {' < '.join(lines[:3])}", flush=True)


if __name__ == "__main__":
    main()
