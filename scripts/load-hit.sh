#!/usr/bin/env bash
# Cache-hit throughput of the real binary against nginx proxy_cache, same run, same
# machine, same upstream (the simulator), same response: wrk on loopback.
# Installs Debian's nginx and wrk when missing. Prints requests/s and the ratio.
#   DURATION=10 CONNECTIONS=64 TARGET=/market/indices scripts/load-hit.sh
set -euo pipefail
cd "$(dirname "$0")/.."
duration=${DURATION:-10}
connections=${CONNECTIONS:-64}
target=${TARGET:-/market/indices}

if ! command -v nginx >/dev/null || ! command -v wrk >/dev/null; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx-light wrk >/dev/null
fi
cargo build --release --quiet --bin mdproxy
bin=target/release/mdproxy
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  [ -f "$work/nginx.pid" ] && kill "$(cat "$work/nginx.pid")" 2>/dev/null || true
  [ -n "${KEEP:-}" ] && cat "$work/error.log" >&2; rm -rf "$work"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
sim_port=$(free_port); proxy_port=$(free_port); nginx_port=$(free_port)

"$bin" sim --listen "127.0.0.1:$sim_port" --token sim-secret --log warn >/dev/null & pids+=($!)
cat > "$work/mdproxy.toml" <<TOML
[server]
listen = "127.0.0.1:$proxy_port"
[auth]
tokens = ["load-token"]
[upstream]
base_url = "http://127.0.0.1:$sim_port/api/v1"
token = "sim-secret"
[scheduler]
enabled = false
# Keep the measured key fresh for the whole run: this measures hits, not refreshes.
[freshness.classes.live]
session_fresh_secs = 3600
closed_fresh_secs = 3600
until_open = false
TOML
"$bin" serve --config "$work/mdproxy.toml" --log warn >/dev/null & pids+=($!)

mkdir -p "$work/cache"
cat > "$work/nginx.conf" <<NGINX
worker_processes 2;
user $(id -un);
pid $work/nginx.pid;
error_log $work/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  proxy_cache_path $work/cache levels=1:2 keys_zone=md:16m max_size=256m inactive=1h use_temp_path=off;
  upstream sim { server 127.0.0.1:$sim_port; keepalive 64; }
  server {
    listen 127.0.0.1:$nginx_port;
    location /api/v1/ {
      proxy_pass http://sim;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Authorization "Bearer sim-secret";
      proxy_cache md;
      proxy_cache_key \$uri\$is_args\$args;
      proxy_cache_valid 200 1h;
      proxy_cache_lock on;
      add_header X-Cache \$upstream_cache_status;
    }
  }
}
NGINX
nginx -c "$work/nginx.conf" -p "$work"

for _ in $(seq 100); do
  curl -s -o /dev/null "http://127.0.0.1:$proxy_port/" && curl -s -o /dev/null "http://127.0.0.1:$nginx_port/" && break
  sleep 0.1
done
auth="Authorization: Bearer load-token"
# Warm both caches and show what is measured.
for url in "http://127.0.0.1:$proxy_port/api/v1$target" "http://127.0.0.1:$nginx_port/api/v1$target"; do
  curl -s -o /dev/null -H "$auth" "$url"
  curl -s -D - -o "$work/body" -H "$auth" "$url" | grep -i "^x-cache\|^HTTP" | tr -d "\r" || true
done
echo "body: $(wc -c < "$work/body") bytes"

run() { wrk -t2 -c"$connections" -d"${duration}s" -H "$auth" "$1" | awk '/Requests\/sec/ {print $2}'; }
nginx_rps=$(run "http://127.0.0.1:$nginx_port/api/v1$target")
mdproxy_rps=$(run "http://127.0.0.1:$proxy_port/api/v1$target")
nginx_rps2=$(run "http://127.0.0.1:$nginx_port/api/v1$target")
mdproxy_rps2=$(run "http://127.0.0.1:$proxy_port/api/v1$target")
python3 - "$nginx_rps" "$mdproxy_rps" "$nginx_rps2" "$mdproxy_rps2" <<PY
import sys
n1, m1, n2, m2 = map(float, sys.argv[1:])
n, m = (n1 + n2) / 2, (m1 + m2) / 2
print(f"wrk -t2 -c$connections -d${duration}s $target, two rounds each, interleaved")
print(f"  nginx proxy_cache: {n1:,.0f} / {n2:,.0f} req/s")
print(f"  mdproxy          : {m1:,.0f} / {m2:,.0f} req/s")
print(f"  mdproxy / nginx  : {m / n:.2f}")
PY
