#!/usr/bin/env bash
# Flood measurements against the release binary in front of the simulator (issue 9):
# RSS under 200,000 distinct cold keys vs cache.max_bytes, 4,000 candidate codes' large K-lines in
# four codings (CODINGS_KEYS, by CODINGS_CLIENTS) vs the same bound, 5,000 non-reading stream
# subscribers, and a normal client's latency during slow-loris floods. Prints the
# figures; not part of `cargo test`. Each phase gets a fresh proxy.
#   MAX_BYTES=67108864 KEYS=200000 SUBSCRIBERS=5000 CODES=200 ALLOCATOR=jemalloc scripts/soak.sh [keys|codings|subscribers|slowloris]...
# ALLOCATOR picks the build: jemalloc (the default), mimalloc or system.
# BIN=path measures that binary instead of building one.
set -euo pipefail
cd "$(dirname "$0")/.."
max_bytes=${MAX_BYTES:-67108864}
phases=("$@"); [ ${#phases[@]} -eq 0 ] && phases=(keys codings subscribers slowloris)
ulimit -n "$(ulimit -Hn)"

allocator=${ALLOCATOR:-jemalloc}
case $allocator in
  jemalloc) flags=() ;;
  mimalloc) flags=(--no-default-features --features mimalloc) ;;
  system) flags=(--no-default-features) ;;
  *) echo "ALLOCATOR must be jemalloc, mimalloc or system" >&2; exit 2 ;;
esac
# BIN=path measures a binary built already (ALLOCATOR then only labels it).
if [ -z "${BIN:-}" ]; then
  cargo build --release --quiet -p mdproxy --bin mdproxy "${flags[@]}"
fi
bin=${BIN:-target/release/mdproxy}
echo "allocator: $allocator, binary: $bin"
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
sim_port=$(free_port)
"$bin" sim --listen "127.0.0.1:$sim_port" --token sim-secret --log warn >/dev/null & pids+=($!)

# Starts a proxy with `max_connections` $1; sets $proxy_pid and $proxy_port.
start_proxy() {
  proxy_port=$(free_port)
  cat > "$work/mdproxy.toml" <<TOML
[server]
listen = "127.0.0.1:$proxy_port"
max_connections = $1
max_header_bytes = ${MAX_HEADER_BYTES:-16384}
[auth]
tokens = ["soak-token"]
[upstream]
base_url = "http://127.0.0.1:$sim_port/api/v1"
token = "sim-secret"
[cache]
max_bytes = $max_bytes
[limits]
upstream_rps = 0
[scheduler]
enabled = false
[hub]
max_streams_per_token = 20000
max_streams = 20000
TOML
  "$bin" serve --config "$work/mdproxy.toml" --log error >/dev/null & proxy_pid=$!
  pids+=($proxy_pid)
  for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$proxy_port/" && break; sleep 0.1; done
}
stop_proxy() { kill "$proxy_pid"; wait "$proxy_pid" 2>/dev/null || true; }

for phase in "${phases[@]}"; do
  case $phase in
    keys)
      start_proxy 10000
      python3 scripts/soak.py keys --port "$proxy_port" --pid "$proxy_pid" --token soak-token \
        --keys "${KEYS:-200000}" --max-bytes "$max_bytes"
      stop_proxy ;;
    codings)
      start_proxy 10000
      python3 scripts/soak.py codings --port "$proxy_port" --pid "$proxy_pid" --token soak-token \
        --keys "${CODINGS_KEYS:-4000}" --connections "${CODINGS_CLIENTS:-64}" --max-bytes "$max_bytes"
      stop_proxy ;;
    subscribers)
      start_proxy 20000
      python3 scripts/soak.py subscribers --port "$proxy_port" --pid "$proxy_pid" --token soak-token \
        --subscribers "${SUBSCRIBERS:-5000}" --codes "${CODES:-200}"
      stop_proxy ;;
    slowloris)
      start_proxy 100
      echo "max_connections = 100:"
      python3 scripts/soak.py slowloris --port "$proxy_port" --pid "$proxy_pid" --token soak-token --slow 150
      stop_proxy
      start_proxy 10000
      echo "max_connections = 10000:"
      python3 scripts/soak.py slowloris --port "$proxy_port" --pid "$proxy_pid" --token soak-token --slow "${SLOW:-10500}"
      stop_proxy ;;
    *) echo "unknown phase $phase" >&2; exit 2 ;;
  esac
done
