#!/usr/bin/env bash
# Instructions per cache hit of the release binary beside the bare hyper server, both
# under callgrind: the figure a noisy machine cannot move, for judging a change to the
# hit path (req/s and the anchors are load-compare.sh's). Prints one table.
# Installs Debian's valgrind, nghttp2-client and curl when missing. About four minutes.
#   REQUESTS=10000               requests a figure
#   SIZES=detail,watchlist,watchlist-gz,week-gz
#   KEEP=1                       keep the callgrind dumps to annotate
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v valgrind >/dev/null || need+=(valgrind)
command -v h2load >/dev/null || need+=(nghttp2-client)
command -v curl >/dev/null || need+=(curl)
if [ ${#need[@]} -gt 0 ]; then
  echo "hit-cost: installing ${need[*]}" >&2
  sudo=""; [ "$(id -u)" -ne 0 ] && sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# Two builds, as in load-compare.sh: the example's dev-dependencies must not change
# the binary that is measured.
cargo build --release --quiet --bin mdproxy
cargo build --release --quiet -p mdproxy --example bare_hyper
target_dir=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')

exec python3 scripts/hit-cost.py \
  --bin "$target_dir/release/mdproxy" \
  --bare "$target_dir/release/examples/bare_hyper" \
  --requests "${REQUESTS:-10000}" \
  --sizes "${SIZES:-detail,watchlist,watchlist-gz,week-gz}" \
  ${KEEP:+--keep}
