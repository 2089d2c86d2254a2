#!/usr/bin/env bash
# Cache-hit throughput of the release binary beside its anchors, in one run: mdproxy,
# nginx proxy_cache (at its best: cache on tmpfs, sendfile, keep-alive both ways,
# no access log), Varnish (malloc storage) and a bare hyper server serving mdproxy's own bytes
# (examples/bare_hyper.rs), all in front of the same simulator; wrk (HTTP/1.1) at
# several body sizes with and without gzip, rounds interleaved, and h2load over h2c.
# Prints one table (req/s, ratios, p99) and writes target/load/results.json.
# Installs Debian's nginx-light, varnish, wrk, nghttp2-client and curl when missing.
#   DURATION=6 ROUNDS=5 CONNECTIONS=64 THREADS=2 scripts/load-compare.sh
#   SIZES=detail,week-gz         answers: detail indices watchlist week day, each also -gz -br -zstd
#                                (Accept-Encoding naming that coding; nginx-light has gzip only;
#                                empty: no hit rounds, only the miss flood)
#   ONLY=mdproxy,bare            servers (mdproxy nginx varnish bare relay; before with BEFORE_REV);
#                                relay (examples/bare_relay, hyper relaying each request
#                                to the simulator) is the miss floods' floor, flooded only;
#                                raw the same relay on tokio without hyper (its --raw)
#   BEFORE_REV=746a14d           also measure the release binary of that commit, as "before",
#                                beside this one (hit rows and the miss flood gain md/before)
#   H2_SIZES=detail,watchlist    answers for h2load (empty: none); H2_STREAMS=10
#   WARMUP=1                     seconds of wrk per server and answer before round 1
#   MISS_ROUNDS=2                rounds of the miss flood (every request a new key; 0: none)
#   MISS_KINDS=news-search,cpi-page,unlisted-code   the kinds of misses flooded (also
#                                news-search-gz: the news search asked with gzip)
#   CANDIDATE=path/to/mdproxy    another build, measured beside this one (an A/B: cand/md)
#   KEEP=1                       keep the work directory (configs, logs)
#   NGINX_CACHE_404=1            nginx keeps the upstream's 404s 30 s as mdproxy does
#                                (by default it caches the 200s only: a 404 passes through)
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v nginx >/dev/null || need+=(nginx-light)
command -v varnishd >/dev/null || need+=(varnish)
command -v wrk >/dev/null || need+=(wrk)
command -v h2load >/dev/null || need+=(nghttp2-client)
command -v curl >/dev/null || need+=(curl)
if [ ${#need[@]} -gt 0 ]; then
  echo "load-compare: installing ${need[*]}" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

target_dir=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
before=()
if [ -n "${BEFORE_REV:-}" ]; then
  # The earlier commit's binary, built once from `git archive` into the same target
  # directory (the dependencies are shared) and kept under target/before/.
  rev=$(git rev-parse --short "$BEFORE_REV")
  old="$target_dir/before/$rev"
  if [ ! -x "$old/mdproxy" ]; then
    rm -rf "$old/src" && mkdir -p "$old/src"
    # -m: the files get the time of extraction, not the commit's. cargo names a
    # workspace crate's build by its path under the workspace root, the same for
    # both trees, and judges it by the files' times: sources dated before the
    # current tree's last build looked unchanged, and "before" was the current code.
    git archive "$rev" | tar -x -m -C "$old/src"
    cargo build --release --quiet --bin mdproxy --manifest-path "$old/src/Cargo.toml" --target-dir "$target_dir"
    cp "$target_dir/release/mdproxy" "$old/mdproxy"
    rm -rf "$old/src"
  fi
  before=(--before "$old/mdproxy")
fi
# Two builds: an example pulls in the dev-dependencies, whose features must not
# change the binary that is measured.
cargo build --release --quiet --bin mdproxy
cargo build --release --quiet -p mdproxy --example bare_hyper --example bare_relay
ulimit -n "$(ulimit -Hn)"

exec python3 scripts/load-compare.py \
  --bin "$target_dir/release/mdproxy" \
  --bare "$target_dir/release/examples/bare_hyper" \
  --relay "$target_dir/release/examples/bare_relay" \
  --duration "${DURATION:-6}" \
  --rounds "${ROUNDS:-5}" \
  --connections "${CONNECTIONS:-64}" \
  --threads "${THREADS:-2}" \
  --sizes "${SIZES-detail,watchlist,watchlist-gz,week,week-gz,day}" \
  --only "${ONLY:-mdproxy,nginx,varnish,bare,relay}" \
  --h2-sizes "${H2_SIZES-detail,watchlist}" \
  --h2-streams "${H2_STREAMS:-10}" \
  --warmup "${WARMUP:-1}" \
  --miss-rounds "${MISS_ROUNDS:-2}" --miss-kinds "${MISS_KINDS:-news-search,cpi-page,unlisted-code}" \
  --candidate "${CANDIDATE:-}" \
  --json "$target_dir/load/results.json" \
  ${NGINX_CACHE_404:+--nginx-cache-404} \
  "${before[@]}"
