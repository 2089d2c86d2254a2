#!/usr/bin/env bash
# Instructions per cache miss of the release binary under callgrind (issue 44's
# first measure), beside nginx's counted the same way in the same run. Installs
# Debian's valgrind, nghttp2-client and nginx-light when missing. A few minutes.
#   REQUESTS=2000 KINDS=news-search,cpi-page,unlisted-code BIN=path scripts/miss-cost.sh
#                                (also news-search-gz: the news search asked with gzip)
#   ANCHORS=nginx                the anchors counted beside mdproxy: nginx, relay (a bare
#                                hyper relay, examples/bare_relay: the stack's floor), raw
#                                (the same relay without hyper, its --raw); empty: none
#   KEEP=1                       keep the callgrind dumps (one per kind) to annotate
#   COPIES=1                     memcpy's bytes a miss by call site instead (mdproxy alone,
#                                scripts/memcpy-census.c preloaded; cc and addr2line)
#   MAX_MIB=64 WARM=8000         mdproxy's cache.max_bytes, and misses before counting
#                                (a fifth of REQUESTS when unset): a cache the warm-up fills,
#                                so that every counted miss evicts, as on a busy node
set -euo pipefail
cd "$(dirname "$0")/.."
need=()
command -v valgrind >/dev/null || need+=(valgrind)
command -v h2load >/dev/null || need+=(nghttp2-client)
case ",${ANCHORS-nginx}," in *,nginx,*) command -v nginx >/dev/null || need+=(nginx-light) ;; esac
if [ ${#need[@]} -gt 0 ]; then
  sudo=""; [ "$(id -u)" -ne 0 ] && sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
if [ -z "${BIN:-}" ]; then
  cargo build --release --quiet -p mdproxy --bin mdproxy
fi
case ",${ANCHORS-nginx}," in *,relay,*|*,raw,*) cargo build --release --quiet -p mdproxy --example bare_relay ;; esac
target_dir=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
exec python3 scripts/miss-cost.py --bin "${BIN:-target/release/mdproxy}" \
  --requests "${REQUESTS:-2000}" --kinds "${KINDS:-news-search,cpi-page,unlisted-code}" \
  --anchors "${ANCHORS-nginx}" --relay "$target_dir/release/examples/bare_relay" \
  --max-mib "${MAX_MIB:-0}" --warm "${WARM:-0}" ${COPIES:+--copies}
