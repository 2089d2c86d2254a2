#!/usr/bin/env python3
"""kill -9 in the middle of disk writes (issue 28): fills 5,000 K-lines through
mdproxy with a disk tier from 4 connections, kills it 2.5 s in, restarts it, then
reads every key filled (and 50 more): each must be a disk hit with the simulator's
exact bytes, or a miss refetched; prints how many of each, wrong bodies and drops.
Run from the repository after `cargo build --release` (under /work/bin/cpu here);
its files live under target/disk-kill and are deleted at the end."""
import sys, os, time, json, signal, subprocess, threading, http.client, datetime, shutil, random
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import harness
BIN = os.path.join(ROOT, "target/release/mdproxy")
W = os.path.join(ROOT, "target/disk-kill")
shutil.rmtree(W, ignore_errors=True); os.makedirs(W)
sp, mp, ap = harness.free_port(), harness.free_port(), harness.free_port()
sim = subprocess.Popen([BIN, "sim", "--listen", f"127.0.0.1:{sp}", "--token", "s", "--log", "warn"], stdout=open(f"{W}/sim.log","w"), stderr=subprocess.STDOUT)
harness.wait_listening("sim", sp, sim, f"{W}/sim.log", 20)
open(f"{W}/md.toml","w").write(f'''[server]
listen = "127.0.0.1:{mp}"
[admin]
listen = "127.0.0.1:{ap}"
[auth]
tokens = ["c"]
[upstream]
base_url = "http://127.0.0.1:{sp}/api/v1"
token = "s"
probe_target = ""
[limits]
upstream_rps = 0
[scheduler]
enabled = false
[cache]
max_bytes = 67108864
disk_path = "{W}/disk"
disk_bytes = 1073741824
''')
def start():
    p = subprocess.Popen([BIN, "serve", "--config", f"{W}/md.toml", "--log", "warn"], stdout=open(f"{W}/md.log","a"), stderr=subprocess.STDOUT)
    harness.wait_listening("md", mp, p, f"{W}/md.log", 30)
    return p
def get(port, path, token):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request("GET", path, headers={"Authorization": f"Bearer {token}"})
    r = c.getresponse(); return r.status, dict((k.lower(), v) for k, v in r.getheaders()), r.read()
y = (datetime.date.today() - datetime.timedelta(days=1)).isoformat()
codes = []
for page in range(1, 20):
    st, _, b = get(sp, f"/api/v1/stock/screener/universe?market=CN_A&page={page}&pageSize=500", "s")
    items = json.loads(b)["data"]["items"]
    if not items: break
    codes += [i["code"] for i in items]
random.Random(9).shuffle(codes)
keys = [f"/api/v1/stock/kline?code={c}&period={p}&fqt=none&to={y}" for p in ("day", "week") for c in codes[:2500]]
md = start()
done = [0]
def worker(ks):
    for k in ks:
        try:
            get(mp, k, "c"); done[0] += 1
        except Exception:
            return
ts = [threading.Thread(target=worker, args=(keys[i::4],)) for i in range(4)]
[t.start() for t in ts]
time.sleep(2.5)
md.send_signal(signal.SIGKILL); md.wait()
[t.join() for t in ts]
print(f"killed after {done[0]} fills")
md = start()
hits = misses = bad = 0
for k in keys[:done[0] + 50]:
    st, h, body = get(mp, k, "c")
    _, _, want = get(sp, k, "s")
    if body != want or st != 200: bad += 1
    if "detail=disk" in h.get("cache-status", ""): hits += 1
    else: misses += 1
c = http.client.HTTPConnection("127.0.0.1", ap, timeout=10); c.request("GET", "/status.json")
d = json.loads(c.getresponse().read())["disk"]
print(json.dumps({"filled_before_kill": done[0], "disk_hits_after": hits, "refetched": misses, "wrong_bodies": bad, "dropped": d["dropped"], "open_ms": d["open_ms"]}))
md.terminate(); md.wait(); sim.terminate(); sim.wait()
shutil.rmtree(W, ignore_errors=True)
