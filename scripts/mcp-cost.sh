#!/usr/bin/env bash
# What an MCP tool call answered from the cache costs beside the REST hit for the
# same key, and what the cache saves a team of agents (issue 42). The release binary
# in front of its simulator, [mcp] on; wrk (HTTP/1.1, keep-alive) asks the REST hit
# and the same data as a `tools/call` (the stateless 2026-07-28 revision: every
# request stands alone), rounds interleaved; then AGENTS agents, each with a session
# of its own (2025-06-18), make CALLS calls each over a few tools and codes, and
# mdproxy's own count of upstream requests (its admin /metrics) says what reached
# the upstream. Prints one table. Installs wrk and curl when missing.
#   DURATION=5 ROUNDS=5 CONNECTIONS=32 AGENTS=20 CALLS=50 scripts/mcp-cost.sh
set -euo pipefail
cd "$(dirname "$0")/.."
need=()
command -v wrk >/dev/null || need+=(wrk)
command -v curl >/dev/null || need+=(curl)
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
if [ -z "${BIN:-}" ]; then
  cargo build --release --quiet -p mdproxy --bin mdproxy
fi
exec python3 scripts/mcp-cost.py --bin "${BIN:-target/release/mdproxy}" \
  --duration "${DURATION:-5}" --rounds "${ROUNDS:-5}" --connections "${CONNECTIONS:-32}" \
  --agents "${AGENTS:-20}" --calls "${CALLS:-50}"
