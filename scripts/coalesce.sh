#!/usr/bin/env bash
# Coalesced waiters on one cold key (issue 11, goal 2): 200 waiters on warm keep-alive
# connections per round, an upstream that takes 200 ms; prints the waiters' latency
# beyond the upstream's (p50, p99, max) and the upstream requests per round.
# Runs examples/coalesce.rs in release; the simulator and the proxy run in process,
# then the same rounds against a bare hyper floor (one shared timer per key), then
# against nginx (proxy_cache_lock, cache on tmpfs) and Varnish in front of the same
# simulator, those of them installed (COALESCE_ANCHORS= for none; load-compare.sh
# installs both).
#   COALESCE_ROUNDS=20 COALESCE_WAITERS=200 COALESCE_UPSTREAM_MS=200 scripts/coalesce.sh
# COALESCE_SERVING_THREADS=1: mdproxy's connections on serving threads, one a core
# (`server.work_stealing = false`), instead of its shared runtime.
set -euo pipefail
cd "$(dirname "$0")/.."
ulimit -n "$(ulimit -Hn)"
if [ -z "${COALESCE_ANCHORS+set}" ]; then
  anchors=()
  command -v nginx >/dev/null && anchors+=(nginx)
  command -v varnishd >/dev/null && anchors+=(varnish)
  COALESCE_ANCHORS=$(IFS=,; echo "${anchors[*]}")
  export COALESCE_ANCHORS
fi
exec cargo run --release --quiet -p mdproxy --example coalesce
