#!/usr/bin/env bash
# The disk tier beside nginx proxy_cache (its cache on disk), in one run: mdproxy at
# a memory budget far below a multi-GiB working set of real K-line bodies, disk hits
# and memory hits per second with p99, nginx serving the same bodies from its disk
# cache, bare hyper serving them from memory, restart (kill -9) to first disk hit,
# RSS. Prints one table and writes target/disk-compare/results.json. Installs
# Debian's nginx-light and wrk if missing.
# Needs about three times the working set free on disk (both caches and bare hyper's
# copy of the answers), deleted at the end.
#   WORKING_SET_MIB=3072 MAX_MIB=64 DISK_MIB=4096 DURATION=10 ROUNDS=3 scripts/disk-compare.sh
# PROFILE=/tmp/disk.perf also records mdproxy (`perf record -g`) in each disk round (.2, .3: the later ones).
# ENCODING=gzip sends Accept-Encoding: gzip with every request (fills and rounds), and
# nginx compresses (`gzip on`): clients that compress, as browsers do.
# ONLY="mdproxy disk,nginx sendfile" runs only those rounds (a quick look; of
# mdproxy disk, nginx disk, nginx sendfile, bare hyper, mdproxy memory).
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v nginx >/dev/null || need+=(nginx-light)
command -v wrk >/dev/null || need+=(wrk)
if [ ${#need[@]} -gt 0 ]; then
  echo "disk-compare: installing ${need[*]}" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# Two builds: an example pulls in the dev-dependencies, whose features must not
# change the binary that is measured.
cargo build --release --quiet --bin mdproxy
cargo build --release --quiet -p mdproxy --example bare_hyper
target_dir=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
ulimit -n "$(ulimit -Hn)"

exec python3 scripts/disk-compare.py \
  --bin "$target_dir/release/mdproxy" \
  --bare "$target_dir/release/examples/bare_hyper" \
  --dir "$target_dir/disk-compare/work" \
  --working-set-mib "${WORKING_SET_MIB:-3072}" \
  --max-mib "${MAX_MIB:-64}" \
  --disk-mib "${DISK_MIB:-4096}" \
  --duration "${DURATION:-10}" \
  --rounds "${ROUNDS:-3}" \
  --restarts "${RESTARTS:-3}" \
  --connections "${CONNECTIONS:-32}" \
  --threads "${THREADS:-2}" \
  --json "$target_dir/disk-compare/results.json" \
  ${ENCODING:+--encoding "$ENCODING"} \
  ${ONLY:+--only "$ONLY"} \
  ${PROFILE:+--profile "$PROFILE"}
