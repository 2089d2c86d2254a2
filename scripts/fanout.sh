#!/usr/bin/env bash
# The quote stream's fan-out at scale beside nchan, same run, same machine (issue 11,
# goal 3). For each N: mdproxy `serve` (release build) in front of the simulator on a
# fast clock (every quote moves on every 1 s hub poll), N subscribers of CODES codes
# each out of a UNION-code union; then nginx + nchan with N EventSource subscribers
# of one channel and a publisher posting, once a second, the same quote rows (CODES
# of them, fresh from the simulator) as one message. Measures, per tick, the spread
# from the first to the last subscriber receiving it (kernel receive timestamps),
# subscribers starved in the window, and the server's resident memory per
# subscriber. Prints one table; raw figures in target/fanout/results.json.
# Installs nginx and its nchan module from Debian's packages when missing.
#   NS="10000 18000" WINDOW=30 CODES=5 UNION=2000 scripts/fanout.sh
# Other knobs: SERVERS="mdproxy nchan", WORKERS=2 (nginx worker processes),
# PER_PROCESS=10000 (subscribers per driver process), CONNECT_RATE=3000 (per second),
# DRIVER_NICE=19 (the subscribers' driver yields the CPU to the server under test, as
# subscribers on other machines would; 0 = equal priority, the rig before),
# RESULTS=target/fanout/results.json, BATCH=100 (hub.batch_size),
# SPEED=6 (simulated seconds per real second),
# ALLOCATOR=jemalloc|mimalloc|system (mdproxy's build, as scripts/soak.sh),
# MAX_HEADER_BYTES (server.max_header_bytes, which is also hyper's max_buf_size),
# BUILD=0 uses the binaries already built (a git worktree rebuilds the crate on every
# cargo build: build.rs watches .git/HEAD, which a worktree does not have),
# BIN=path: that mdproxy binary instead of the release build (scripts/pgo.sh's, say),
# NODES=2: mdproxy as a fleet of that many nodes on one Redis (started here on a
# loopback port; redis-server installed when missing), the subscribers spread over
# them and their memory summed; one hub poll serves them all. One process may hold
# only so many descriptors, so N past that limit needs NODES (nchan: WORKERS) > 1.
# H2=100: mdproxy's subscribers over HTTP/2 (prior knowledge, h2c), that many
# streams on each connection (as a browser's tabs share one; at most
# server.h2_max_streams, 128 by default), so N is not bound by descriptors.
# RCVBUF=4194304: SO_RCVBUF of each HTTP/2 connection of the driver (0: the kernel's
# autotuning, the rig before Nov 29): room for several ticks of its streams.
# SERVER_BUSY=1: the server's CPU (nginx: its workers') is sampled every millisecond (from schedstat), and
# each tick's spread split into the server's part (first arrival to its last busy
# millisecond) and what came after it (server_part_ms, after_server_ms).
# HEAPTRACK=1: mdproxy (system allocator) runs under heaptrack (installed when
# missing) and its biggest live allocation sites at the heap's peak are printed
# per subscriber (use a small N: heaptrack slows it down; the spread then means little).
set -euo pipefail
cd "$(dirname "$0")/.."
ns=${NS:-10000 18000}
window=${WINDOW:-30}
codes=${CODES:-5}
union=${UNION:-2000}
servers=${SERVERS:-mdproxy nchan}
workers=${WORKERS:-2}
ulimit -n "$(ulimit -Hn)"
limit=$(ulimit -n)
nodes=${NODES:-1}
h2=${H2:-0}
for n in $ns; do
  # Each mdproxy node holds its share of the subscribers, each nginx worker about
  # its share (reuseport spreads them).
  for share in $(( n / nodes / (h2 > 0 ? h2 : 1) )) $(( n / workers )); do
    if (( share + 300 > limit )); then
      echo "N=$n puts $share subscribers on one process, more than the $limit descriptors one may hold here: raise NODES and WORKERS" >&2
      exit 2
    fi
  done
done
if (( nodes > 1 )) && ! command -v redis-server >/dev/null; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
fi

if ! command -v nginx >/dev/null || [ ! -f /usr/lib/nginx/modules/ngx_nchan_module.so ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq nginx-light libnginx-mod-nchan >/dev/null 2>&1 ||
    { apt-get update -qq && apt-get install -y -qq nginx-light libnginx-mod-nchan >/dev/null; }
fi

busy=()
[ -n "${SERVER_BUSY:-}" ] && busy=(--server-busy)
allocator=${ALLOCATOR:-jemalloc}
if [ -n "${HEAPTRACK:-}" ]; then
  allocator=system # heaptrack sees malloc, not jemalloc's own entry points
  command -v heaptrack >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq heaptrack >/dev/null; }
fi
case $allocator in
  jemalloc) flags=() ;;
  mimalloc) flags=(--no-default-features --features mimalloc) ;;
  system) flags=(--no-default-features) ;;
  *) echo "ALLOCATOR must be jemalloc, mimalloc or system" >&2; exit 2 ;;
esac
if [ "${BUILD:-1}" != 0 ]; then
  cargo build --release --quiet -p mdproxy --bin mdproxy "${flags[@]}"
  cargo build --release --quiet -p mdproxy --example fanout_sim
fi
bin=${BIN:-target/release/mdproxy}
mkdir -p target/fanout
results=${RESULTS:-target/fanout/results.json}
rm -f "$results"
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  [ -f "$work/nginx.pid" ] && kill "$(cat "$work/nginx.pid")" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_http() { for _ in $(seq 100); do curl -s -o /dev/null "$1" && return 0; sleep 0.1; done; echo "no answer from $1" >&2; return 1; }

sim_port=$(free_port)
target/release/examples/fanout_sim --listen "127.0.0.1:$sim_port" --token sim-secret \
  --speed "${SPEED:-6}" --codes "$union" --codes-out "$work/codes.txt" >/dev/null & pids+=($!)
wait_http "http://127.0.0.1:$sim_port/"
publish_codes=$(head -n "$codes" "$work/codes.txt" | paste -sd,)

echo "fan-out: N in {$ns}, $codes codes per subscriber out of $union, ${window} s window, $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
for n in $ns; do
  for server in $servers; do
    case $server in
      mdproxy)
        share=$(( n / nodes + 100 ))
        cluster=""
        if (( nodes > 1 )); then
          redis_port=$(free_port)
          redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no \
            >"$work/redis.log" 2>&1 & pids+=($!)
          for _ in $(seq 50); do redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break; sleep 0.1; done
          cluster="[cluster]
redis_url = \"redis://127.0.0.1:$redis_port\""
        fi
        ports=() node_pids=()
        for node in $(seq 0 $(( nodes - 1 ))); do
        port=$(free_port)
        ports+=("$port")
        cat > "$work/mdproxy.toml" <<TOML
[server]
listen = "127.0.0.1:$port"
max_connections = $share
max_connections_per_client_percent = 100
max_header_bytes = ${MAX_HEADER_BYTES:-16384}
[auth]
tokens = ["fanout-token"]
[upstream]
base_url = "http://127.0.0.1:$sim_port/api/v1"
token = "sim-secret"
[scheduler]
enabled = false
[limits]
upstream_rps = 0
[hub]
session_interval_ms = 1000
closed_interval_ms = 1000
batch_size = ${BATCH:-100}
max_streams = $share
max_streams_per_token = $share
$cluster
$( (( nodes > 1 )) && echo "node_id = \"node-$node\"" || true )
TOML
        cp "$work/mdproxy.toml" "$work/mdproxy-$node.toml"
        if [ -n "${HEAPTRACK:-}" ]; then
          heap=target/fanout/heaptrack-mdproxy-$n
          rm -f "$heap".*
          heaptrack -o "$heap" "$bin" serve --config "$work/mdproxy.toml" --log warn >"$work/mdproxy.log" 2>&1 & wrapper=$!
          pids+=($wrapper)
          wait_http "http://127.0.0.1:$port/"
          # The server itself, below heaptrack's wrapper script.
          pid=$(pgrep -f -- "--config $work/mdproxy.toml" | while read -r p; do
            [ "$(readlink "/proc/$p/exe")" = "$(realpath "$bin")" ] && echo "$p"; done | head -1)
        else
          "$bin" serve --config "$work/mdproxy-$node.toml" --log warn >"$work/mdproxy-$node.log" 2>&1 & pid=$!
          pids+=($pid)
          wait_http "http://127.0.0.1:$port/"
        fi
        node_pids+=("$pid")
        done
        # The fleet's nodes see each other (and agree on the hub's leader) first.
        (( nodes > 1 )) && sleep 3
        echo "mdproxy, N=$n$( (( nodes > 1 )) && echo ", $nodes nodes on one Redis" || true)$( (( h2 > 0 )) && echo ", HTTP/2 with $h2 streams a connection" || true):"
        python3 scripts/fanout.py run --server mdproxy --pid "$(IFS=,; echo "${node_pids[*]}")" \
          --port "$(IFS=,; echo "${ports[*]}")" --n "$n" --h2 "$h2" \
          --codes-file "$work/codes.txt" --codes "$codes" --window "$window" --out "$results" \
          --per-process "${PER_PROCESS:-10000}" --connect-rate "${CONNECT_RATE:-3000}" \
          --driver-nice "${DRIVER_NICE:-19}" --rcvbuf "${RCVBUF:-4194304}" "${busy[@]}" \
          --request 'GET /api/v1/stock/indicator/realtime/sse?codes={codes}&pz=20 HTTP/1.1\r\nHost: fanout\r\nAuthorization: Bearer fanout-token\r\n\r\n'
        for p in "${node_pids[@]}"; do kill "$p"; wait "$p" 2>/dev/null || true; done
        if [ -n "${HEAPTRACK:-}" ]; then
          wait "$wrapper" 2>/dev/null || true
          python3 scripts/fanout.py heap "$heap.zst" --n "$n"
        fi
        cat "$work"/mdproxy-*.log | grep -E "WARN|ERROR" | tail -3 | sed 's/^/  mdproxy log: /' || true
        ;;
      nchan)
        port=$(free_port)
        rm -f "$work/error.log"
        cat > "$work/nginx.conf" <<NGINX
load_module /usr/lib/nginx/modules/ngx_nchan_module.so;
worker_processes $workers;
worker_rlimit_nofile $limit;
user $(id -un);
pid $work/nginx.pid;
error_log $work/error.log warn;
events { worker_connections $((limit - 500)); }
http {
  access_log off;
  server {
    listen 127.0.0.1:$port reuseport backlog=4096;
    location = /pub {
      nchan_publisher;
      nchan_channel_id quotes;
      nchan_message_buffer_length 10;
      nchan_message_timeout 60s;
      client_body_buffer_size 64k;
    }
    location = /sub {
      nchan_subscriber eventsource;
      nchan_channel_id quotes;
      nchan_eventsource_event quote;
      nchan_subscriber_first_message newest;
    }
    location = / { return 200 "nchan\n"; }
  }
}
NGINX
        nginx -c "$work/nginx.conf" -p "$work" -g 'daemon off;' & pid=$!
        pids+=($pid)
        wait_http "http://127.0.0.1:$port/"
        echo "nchan, N=$n ($workers nginx workers):"
        python3 scripts/fanout.py run --server nchan --pid "$pid" --port "$port" --n "$n" \
          --window "$window" --out "$results" \
          --per-process "${PER_PROCESS:-10000}" --connect-rate "${CONNECT_RATE:-3000}" \
          --driver-nice "${DRIVER_NICE:-19}" "${busy[@]}" \
          --publish-url "http://127.0.0.1:$port/pub" \
          --publish-source "http://127.0.0.1:$sim_port/api/v1/stock/list?codes=$publish_codes" \
          --publish-token sim-secret \
          --request 'GET /sub HTTP/1.1\r\nHost: fanout\r\nAccept: text/event-stream\r\n\r\n'
        kill "$pid"; wait "$pid" 2>/dev/null || true
        grep -v "^$" "$work/error.log" 2>/dev/null | tail -3 | sed 's/^/  nginx log: /' || true
        ;;
      *) echo "unknown server $server" >&2; exit 2 ;;
    esac
  done
done
echo
python3 scripts/fanout.py table "$results"
echo "raw figures: $results"
