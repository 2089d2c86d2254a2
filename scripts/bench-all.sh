#!/usr/bin/env bash
# Every measure of docs/BENCHMARKS.md "Issue 44 in one run", once, in one sitting,
# each beside its anchors: hits (instructions, wrk, h2load), instructions a miss
# beside nginx's, the miss flood in four kinds, the 404 both ways (nginx relaying it, nginx keeping it), disk hits beside
# nginx `sendfile`, 200 waiters on one cold key, the quote stream at 10,000
# (HTTP/1.1 beside nchan, HTTP/2) and 30,000 (HTTP/2 in one process, HTTP/1.1 on two
# nodes sharing one poll through Redis; the HTTP/2 runs with SERVER_BUSY=1, so the
# table gives the server's own part of the spread). Then prints the table
# (scripts/bench-all.py), under the commit, the before build, the machine and the
# times it writes first to OUT/run.txt.
# The scripts it runs install what they need (nginx, Varnish, nchan, wrk, h2load,
# valgrind, redis-server). About 30 minutes on 2 cores; never beside another build
# or load run.
#   BEFORE_REV=75ff7a4 scripts/bench-all.sh   also that commit's build, as "before"
#   FANOUT_RUNS=2        runs at 10,000 subscribers, each protocol
#   SKIP="disk waiters"  steps left out, of: hits misses 404 misscost disk waiters fanout
#                        fanout30k
#   OUT=target/bench-all each step's log and raw figures (JSON), then the table
set -euo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-target/bench-all}
runs=${FANOUT_RUNS:-2}
skip=" ${SKIP:-} "
mkdir -p "$out"
rm -f "$out"/*.json "$out"/*.log "$out"/*.txt
ulimit -n "$(ulimit -Hn)"
# What was measured, where: the table names it (a run's figures are of its commit
# and machine only).
dirty=""
git diff --quiet HEAD 2>/dev/null || dirty=" with uncommitted changes"
cpu=$(grep -m1 "model name" /proc/cpuinfo | cut -d: -f2- | xargs)
family=$(grep -m1 "cpu family" /proc/cpuinfo | cut -d: -f2 | xargs)
model=$(grep -m1 "^model\s" /proc/cpuinfo | cut -d: -f2 | xargs)
{
  echo "commit: $(git rev-parse --short HEAD)$dirty"
  echo "before: ${BEFORE_REV:-none}"
  echo "machine: $cpu (family $family, model $model), $(nproc) cores"
  echo "started: $(date -u +%FT%TZ)"
} >"$out/run.txt"

want() { [[ "$skip" != *" $1 "* ]]; }
step() { echo "== $(date +%T) $*" >&2; }
# load-compare.sh builds the before binary (target/before/REV/mdproxy); the steps
# after it measure that binary too once it is there.
before_bin=""
has_before() {
  [ -n "${BEFORE_REV:-}" ] && before_bin="target/before/$(git rev-parse --short "$BEFORE_REV")/mdproxy" \
    && [ -x "$before_bin" ]
}

if want hits || want misses; then
  step "hits and misses (load-compare.sh)"
  SIZES=$(want hits && echo detail,watchlist || true) H2_SIZES=$(want hits && echo detail,watchlist || true) \
    ROUNDS=3 DURATION=5 MISS_ROUNDS=$(want misses && echo 3 || echo 0) \
    MISS_KINDS=news-search,news-search-gz,cpi-page,unlisted-code \
    scripts/load-compare.sh >"$out/load.log" 2>&1
  cp target/load/results.json "$out/load.json"
fi
if want 404; then
  for way in relay kept; do
    step "the 404, nginx ${way}"
    SIZES= H2_SIZES= DURATION=4 MISS_ROUNDS=3 MISS_KINDS=unlisted-code ONLY=mdproxy,nginx,relay \
      NGINX_CACHE_404=$([ "$way" = kept ] && echo 1 || true) \
      scripts/load-compare.sh >"$out/404-$way.log" 2>&1
    cp target/load/results.json "$out/404-$way.json"
  done
fi
if want hits; then
  step "instructions a hit (hit-cost.sh)"
  REQUESTS=5000 scripts/hit-cost.sh >"$out/hit-cost.txt" 2>&1
  if has_before; then
    python3 scripts/hit-cost.py --bin "$before_bin" --bare "" --requests 5000 >"$out/hit-cost-before.txt" 2>&1
  fi
fi
if want misscost; then
  step "instructions a miss (miss-cost.sh)"
  REQUESTS=2000 scripts/miss-cost.sh >"$out/miss-cost.txt" 2>&1
  if has_before; then
    python3 scripts/miss-cost.py --bin "$before_bin" --anchors "" --requests 2000 \
      --kinds news-search,cpi-page,unlisted-code >"$out/miss-cost-before.txt" 2>&1
  fi
fi
if want disk; then
  step "disk hits (disk-compare.sh)"
  disk=(WORKING_SET_MIB=1024 MAX_MIB=64 DISK_MIB=2048 DURATION=8 ROUNDS=3 RESTARTS=1)
  env "${disk[@]}" ONLY="mdproxy disk,nginx sendfile,bare hyper" scripts/disk-compare.sh >"$out/disk.log" 2>&1
  cp target/disk-compare/results.json "$out/disk.json"
  if has_before; then
    python3 scripts/disk-compare.py --bin "$before_bin" --bare target/release/examples/bare_hyper \
      --dir target/disk-compare/work --working-set-mib 1024 --max-mib 64 --disk-mib 2048 \
      --duration 8 --rounds 3 --restarts 1 --connections 32 --threads 2 \
      --only "mdproxy disk,nginx sendfile,bare hyper" --json "$out/disk-before.json" >"$out/disk-before.log" 2>&1
  fi
fi
if want waiters; then
  step "200 waiters (coalesce.sh)"
  scripts/coalesce.sh >"$out/waiters.txt" 2>&1
fi
if want fanout; then
  for i in $(seq 1 "$runs"); do
    step "10,000 subscribers, HTTP/1.1 beside nchan, run $i"
    NS=10000 RESULTS="$out/fanout-h1-$i.json" scripts/fanout.sh >"$out/fanout-h1-$i.log" 2>&1
    step "10,000 subscribers, HTTP/2, run $i"
    NS=10000 H2=100 SERVERS=mdproxy BUILD=0 SERVER_BUSY=1 RESULTS="$out/fanout-h2-$i.json" scripts/fanout.sh >"$out/fanout-h2-$i.log" 2>&1
  done
fi
if want fanout30k; then
  step "30,000 subscribers, HTTP/2 in one process"
  NS=30000 H2=100 SERVERS=mdproxy BUILD=0 SERVER_BUSY=1 RESULTS="$out/fanout30k-h2.json" scripts/fanout.sh >"$out/fanout30k-h2.log" 2>&1
  step "30,000 subscribers, two nodes on one Redis, beside nchan"
  NS=30000 NODES=2 BUILD=0 RESULTS="$out/fanout30k-nodes2.json" scripts/fanout.sh >"$out/fanout30k-nodes2.log" 2>&1
fi
step "done"
echo "ended: $(date -u +%FT%TZ)" >>"$out/run.txt"
exec python3 scripts/bench-all.py "$out"
