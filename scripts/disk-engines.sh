#!/usr/bin/env bash
# How the disk tier's engine was chosen (docs/BENCHMARKS.md, "Disk tier"): samples
# real K-line bodies from the simulator, then writes a working set of them into
# foyer's block engine, fjall (LSM, key-value separation) and redb (B-tree), reopens
# each and reads random keys from several threads (scripts/disk-engines/, a crate of
# its own, not part of mdproxy's build). One JSON line per engine and round.
#   TOTAL_MIB=2048 READS=20000 THREADS=4 ROUNDS=2 ENGINES="foyer fjall redb" scripts/disk-engines.sh
set -euo pipefail
cd "$(dirname "$0")/.."
target_dir=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
work="$target_dir/disk-engines-work"
cargo build --release --quiet --bin mdproxy
CARGO_TARGET_DIR="$target_dir/disk-engines" cargo build --release --quiet \
  --manifest-path scripts/disk-engines/Cargo.toml
rm -rf "$work" && mkdir -p "$work/bodies"
trap 'kill "$sim" 2>/dev/null; rm -rf "$work"' EXIT
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$target_dir/release/mdproxy" sim --listen "127.0.0.1:$port" --token t --log warn &
sim=$!
for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$port/_sim/stats" && break; sleep 0.1; done
# 300 bodies: day, week and month bars of codes across the boards (30 KB to 650 KB).
i=0
codes=$(python3 - "$port" <<'PY'
import json, random, sys, urllib.request
codes = []
for page in range(1, 100):
    req = urllib.request.Request(f"http://127.0.0.1:{sys.argv[1]}/api/v1/stock/screener/universe?market=CN_A&page={page}&pageSize=500",
                                 headers={"Authorization": "Bearer t"})
    items = json.load(urllib.request.urlopen(req))["data"]["items"]
    if not items:
        break
    codes += [i["code"] for i in items]
print(" ".join(random.Random(28).sample(codes, 100)))
PY
)
for code in $codes; do
  for period in day week month; do
    curl -sf -H "Authorization: Bearer t" -o "$work/bodies/$i.json" \
      "http://127.0.0.1:$port/api/v1/stock/kline?code=$code&period=$period&fqt=none&to=2026-01-30"
    i=$((i + 1))
  done
done
echo "bodies: $(ls "$work/bodies" | wc -l), $(du -sh "$work/bodies" | cut -f1)" >&2
for round in $(seq "${ROUNDS:-2}"); do
  for engine in ${ENGINES:-foyer fjall redb}; do
    "$target_dir/disk-engines/release/disk-engines" "$engine" "$work/db" "$work/bodies" \
      "${TOTAL_MIB:-2048}" "${READS:-20000}" "${THREADS:-4}"
  done
done
