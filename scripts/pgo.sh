#!/usr/bin/env bash
# The shipped build (`--profile dist`) optimised by its own profile: built once
# instrumented, trained by scripts/pgo-train.py (about a minute of hits, misses,
# the quote stream, bad requests and the admin pages in front of the simulator on
# its fast clock), then built again with what the training counted
# (docs/BENCHMARKS.md, "Build figures"). Leaves target/pgo/mdproxy.
#
# Two whole builds of the dependency tree, each with RUSTFLAGS of its own (any set
# in the environment are replaced), so each in a target directory of its own under
# target/pgo/ (the usual one only gets the simulator's example, as `--release`). Installs the toolchain's llvm-tools (for
# llvm-profdata, which must match rustc's LLVM) and Debian's nghttp2-client when
# missing. About twenty minutes on two cores.
#   SCALE=1                      multiplies the training's request counts
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v h2load >/dev/null; then
  echo "pgo: installing nghttp2-client" >&2
  sudo=""; [ "$(id -u)" -ne 0 ] && sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends nghttp2-client >/dev/null
fi
host=$(rustc -vV | sed -n 's/^host: //p')
profdata="$(rustc --print sysroot)/lib/rustlib/$host/bin/llvm-profdata"
if [ ! -x "$profdata" ]; then
  echo "pgo: installing the toolchain's llvm-tools" >&2
  rustup component add llvm-tools
fi
# The training's 1,500 quote subscribers hold a descriptor each on both sides.
ulimit -n "$(ulimit -Hn)"

work="$PWD/target/pgo"
rm -rf "$work/profiles" "$work"/*.profdata
mkdir -p "$work/profiles"
# `--target`: RUSTFLAGS then reach the program's crates only, not build scripts
# and proc macros (which would write profiles of their own while building).
build() {
  RUSTFLAGS="$1" cargo build --profile dist --locked --bin mdproxy --target "$host" \
    --target-dir "$work/$2"
}
echo "pgo: the instrumented build" >&2
build "-Cprofile-generate=$work/profiles" gen
cargo build --release --locked --quiet -p mdproxy --example fanout_sim
target_dir=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
echo "pgo: training" >&2
python3 scripts/pgo-train.py --bin "$work/gen/$host/dist/mdproxy" \
  --sim "$target_dir/release/examples/fanout_sim" --profiles "$work/profiles" --scale "${SCALE:-1}"
"$profdata" merge -o "$work/merged.profdata" "$work"/profiles/serve-*.profraw
# Named by its content: cargo does not look into the file RUSTFLAGS names, so a
# new training under the same name would leave the last build in place.
profile="$work/mdproxy-$(sha256sum "$work/merged.profdata" | cut -c1-16).profdata"
mv "$work/merged.profdata" "$profile"
echo "pgo: the optimised build" >&2
# A new profile rebuilds every crate anyway; the last one's would only pile up.
rm -rf "$work/use"
build "-Cprofile-use=$profile" use
cp "$work/use/$host/dist/mdproxy" "$work/mdproxy"
echo "pgo: $work/mdproxy" >&2
