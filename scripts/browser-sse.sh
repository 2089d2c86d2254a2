#!/usr/bin/env bash
# Drives the quote stream from a real browser EventSource: headless Chromium loads a
# page from another loopback origin, subscribes with `access_token` (EventSource
# cannot send headers) through CORS, and the script checks that quote events
# arrived. Installs Debian's chromium when it is missing. Loopback only; every wait
# is bounded.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v chromium >/dev/null; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
cargo build --quiet --bin mdproxy
bin=target/debug/mdproxy
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
sim_port=$(free_port); proxy_port=$(free_port); page_port=$(free_port)

"$bin" sim --listen "127.0.0.1:$sim_port" --token sim-secret --log warn & pids+=($!)
cat > "$work/mdproxy.toml" <<TOML
[server]
listen = "127.0.0.1:$proxy_port"
cors_origins = ["http://127.0.0.1:$page_port"]
[auth]
tokens = ["browser-token"]
[upstream]
base_url = "http://127.0.0.1:$sim_port/api/v1"
token = "sim-secret"
[scheduler]
enabled = false
[hub]
session_interval_ms = 500
closed_interval_ms = 500
TOML
"$bin" serve --config "$work/mdproxy.toml" --log warn & pids+=($!)

cat > "$work/page.html" <<HTML
<!doctype html><meta charset="utf-8"><title>sse</title>
<div id="out">no events</div><div id="err"></div>
<script>
const url = "http://127.0.0.1:$proxy_port/api/v1/stock/indicator/realtime/sse?codes=600519,000001.SZ&pz=1&access_token=browser-token";
const es = new EventSource(url);
let n = 0, codes = new Set();
es.addEventListener("quote", (e) => {
  n++;
  for (const q of JSON.parse(e.data)) codes.add(q.code);
  document.getElementById("out").textContent =
    "events=" + n + " lastEventId=" + e.lastEventId + " codes=" + [...codes].sort().join(",");
  // Closing lets headless Chromium's virtual time run out and dump the page.
  if (n >= 2) es.close();
});
es.onerror = () => { document.getElementById("err").textContent = "error readyState=" + es.readyState; };
</script>
HTML
python3 -m http.server "$page_port" --bind 127.0.0.1 --directory "$work" >/dev/null 2>&1 & pids+=($!)

for _ in $(seq 50); do
  curl -s -o /dev/null "http://127.0.0.1:$proxy_port/" && curl -s -o /dev/null "http://127.0.0.1:$page_port/page.html" && break
  sleep 0.2
done

dom=$(timeout 60 chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
  --disable-background-networking --disable-component-update --disable-sync \
  --user-data-dir="$work/profile" --virtual-time-budget=5000 --dump-dom \
  "http://127.0.0.1:$page_port/page.html" 2>/dev/null || true)
printf "%s\n" "$dom" | grep -E "id=\"(out|err)" >&2 || true
line=$(printf '%s' "$dom" | grep -o 'events=[0-9]* lastEventId=[0-9]* codes=[^<]*' || true)
if [[ "$line" =~ events=([0-9]+).*codes=000001.SZ,600519.SH ]] && (( BASH_REMATCH[1] >= 2 )); then
  echo "browser EventSource OK: $line"
else
  echo "browser EventSource FAILED"; printf '%s\n' "$dom" | tail -5; exit 1
fi
