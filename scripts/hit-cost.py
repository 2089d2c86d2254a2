#!/usr/bin/env python3
"""Instructions per cache hit, mdproxy beside the bare hyper server (callgrind).

Started by scripts/hit-cost.sh, which installs valgrind and h2load and builds the
binaries. On a shared 2-core machine req/s moves by a quarter from run to run; the
number of instructions a request costs does not, so it shows what a change to the
hit path saves where a load run cannot. Both servers run under callgrind in front of
the simulator (the bare one answers mdproxy's own heads and bodies, byte for byte).
For each answer: a warm-up, callgrind's counters zeroed, N requests over four
keep-alive connections (h2load, HTTP/1.1), a dump; the dump's total over N is the
figure (user space only: the kernel's share, about three quarters of the CPU of a
small hit, is not counted). Standard library only; every wait is bounded and every
process is stopped on exit."""

import argparse
import atexit
import os
import shutil
import subprocess
import tempfile

import harness
from harness import free_port

ANSWERS = {
    "detail": ("/api/v1/stock/detail/600519", False),
    "watchlist": ("/api/v1/stock/list?codes=600519,000001,600036,000858,601318,600000,300750", False),
    "watchlist-gz": ("/api/v1/stock/list?codes=600519,000001,600036,000858,601318,600000,300750", True),
    "week-gz": ("/api/v1/stock/kline?code=000001&period=week", True),
}
TOKEN = "load-token"
START_WAIT = 120.0  # seconds: a process under valgrind starts slowly


def wait_listening(work, name, port, p):
    harness.wait_listening(name, port, p, os.path.join(work, f"{name}.log"), START_WAIT)


def curl(port, target, gzip, dump_head=None, body=None):
    cmd = ["curl", "-s", "--max-time", "30", "-H", f"Authorization: Bearer {TOKEN}"]
    if gzip:
        cmd += ["-H", "Accept-Encoding: gzip"]
    if dump_head:
        cmd += ["-D", dump_head]
    cmd += ["-o", body or os.devnull, "-w", "%{http_code}", f"http://127.0.0.1:{port}{target}"]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60).stdout


def h2load(port, target, gzip, n):
    cmd = ["h2load", "--h1", "-n", str(n), "-c", "4", "-H", f"Authorization: Bearer {TOKEN}"]
    if gzip:
        cmd += ["-H", "Accept-Encoding: gzip"]
    out = subprocess.run(cmd + [f"http://127.0.0.1:{port}{target}"], capture_output=True,
                         text=True, timeout=1800).stdout
    line = next((l for l in out.splitlines() if l.startswith("requests:")), "")
    if f"{n} succeeded" not in line:
        raise SystemExit(f"h2load on {port}{target}: {line or out[-500:]}")


def measure(work, name, port, p, out, answers, n):
    """Instructions per request of each answer, in `answers` order."""
    per = {}
    for size in answers:
        target, gzip = ANSWERS[size]
        h2load(port, target, gzip, max(n // 5, 200))  # warm-up: hot set, memo, allocator
        harness.callgrind_control(p.pid, "-z")
        h2load(port, target, gzip, n)
        harness.callgrind_control(p.pid, "-d")
        per[size] = harness.callgrind_total(out) / n
        print(f"  {name:8} {size:14} {per[size]:8.0f} instructions a request", flush=True)
    return per


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--bare", required=True, help="the bare hyper server; empty: mdproxy only")
    ap.add_argument("--requests", type=int, default=10000)
    ap.add_argument("--sizes", default="detail,watchlist,watchlist-gz,week-gz")
    ap.add_argument("--keep", action="store_true",
                    help="keep the callgrind dumps (one part per answer) to annotate")
    args = ap.parse_args()
    answers = [s for s in args.sizes.split(",") if s]
    unknown = [s for s in answers if s not in ANSWERS]
    if unknown:
        raise SystemExit(f"unknown sizes {unknown}; known: {', '.join(ANSWERS)}")
    work = tempfile.mkdtemp(prefix="mdproxy-hit-cost-")
    if args.keep:
        print(f"the callgrind dumps stay in {work} (callgrind_annotate them)", flush=True)
    else:
        atexit.register(shutil.rmtree, work, True)
    children = harness.script_children(work)

    sim_port, md_port, bare_port = free_port(), free_port(), free_port()
    sim = children.start("sim", [args.bin, "sim", "--listen", f"127.0.0.1:{sim_port}",
                              "--token", "up-token", "--log", "warn"])
    wait_listening(work, "sim", sim_port, sim)
    config = os.path.join(work, "mdproxy.toml")
    with open(config, "w") as f:
        f.write(f"""[server]
listen = "127.0.0.1:{md_port}"
[auth]
tokens = ["{TOKEN}"]
[upstream]
base_url = "http://127.0.0.1:{sim_port}/api/v1"
token = "up-token"
[scheduler]
enabled = false
[log]
access = false
""")
        # Every measured answer stays fresh for the whole run.
        for cls in ("live", "intraday"):
            f.write(f"[freshness.classes.{cls}]\nsession_fresh_secs = 3600\n"
                    "closed_fresh_secs = 3600\nuntil_open = false\n")
    md_out = os.path.join(work, "callgrind.mdproxy")
    md = children.start("mdproxy", ["valgrind", "--tool=callgrind", f"--callgrind-out-file={md_out}",
                                 args.bin, "serve", "--config", config, "--log", "warn"])
    wait_listening(work, "mdproxy", md_port, md)

    # The bare server's copy of mdproxy's answers, and a check that each is a hit.
    bare_dir = os.path.join(work, "bare")
    os.makedirs(bare_dir)
    index = []
    for i, size in enumerate(answers):
        target, gzip = ANSWERS[size]
        curl(md_port, target, gzip)  # the fill
        suffix = ".gz" if gzip else ""
        head = os.path.join(bare_dir, f"a{i}{suffix}.headers")
        status = curl(md_port, target, gzip, head, os.path.join(bare_dir, f"a{i}{suffix}.body"))
        text = open(head, encoding="latin-1").read().lower()
        if status != "200" or "x-cache: hit" not in text:
            raise SystemExit(f"{size}: expected a 200 HIT from mdproxy, got {status}:\n{text}")
        if gzip:
            # The bare server needs the identity answer too; it serves .gz when asked.
            curl(md_port, target, False, os.path.join(bare_dir, f"a{i}.headers"),
                 os.path.join(bare_dir, f"a{i}.body"))
        index.append(f"a{i}\t{target}\n")
    with open(os.path.join(bare_dir, "index"), "w") as f:
        f.writelines(index)

    print(f"callgrind, {args.requests} requests a figure over 4 keep-alive connections "
          f"(h2load --h1), user-space instructions only", flush=True)
    md_per = measure(work, "mdproxy", md_port, md, md_out, answers, args.requests)
    md.kill()
    md.wait(timeout=30)
    if not args.bare:
        print()
        print(f"{'answer':14} {'mdproxy':>9}")
        for size in answers:
            print(f"{size:14} {md_per[size]:9.0f}")
        return
    bare_out = os.path.join(work, "callgrind.bare")
    bare = children.start("bare", ["valgrind", "--tool=callgrind", f"--callgrind-out-file={bare_out}",
                                args.bare, "--listen", f"127.0.0.1:{bare_port}", "--dir", bare_dir,
                                "--http1-only"])
    wait_listening(work, "bare", bare_port, bare)
    bare_per = measure(work, "bare", bare_port, bare, bare_out, answers, args.requests)
    print()
    print(f"{'answer':14} {'mdproxy':>9} {'bare':>9} {'md/bare':>8} {'md - bare':>10}")
    for size in answers:
        m, b = md_per[size], bare_per[size]
        print(f"{size:14} {m:9.0f} {b:9.0f} {m / b:8.2f} {m - b:10.0f}")


if __name__ == "__main__":
    main()
