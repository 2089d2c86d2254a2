#!/usr/bin/env bash
# A day of dashboard traffic against a simulator whose source warns, then bans (issue
# 27): the same replay with mdproxy's upstream protection (adaptive rate, quotas) and
# without it; prints the upstream requests spent, the bans triggered, the answers
# served stale and the client errors of each. Runs examples/replay_day.rs in release;
# the simulator and the proxy run in process on one clock REPLAY_FACTOR times faster
# than real time (the default day, 09:00-15:30 at 120x, takes about 3 minutes a run).
#   REPLAY_FACTOR=120 REPLAY_USERS=8 REPLAY_TOLERATED=180 REPLAY_MODE=ban|429 \
#   REPLAY_FROM=09:00 REPLAY_TO=15:30 REPLAY_PER_DAY=30000 scripts/replay-day.sh
set -euo pipefail
cd "$(dirname "$0")/.."
ulimit -n "$(ulimit -Hn)"
exec cargo run --release --quiet -p mdproxy --example replay_day
