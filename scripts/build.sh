#!/usr/bin/env bash
# Configures and builds accel into build/ (ccache-backed). Usage: scripts/build.sh [extra cmake args]
# ACCEL_BUILD_TARGETS="accel" builds only those targets (the quickstart needs no tests); default: all.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${ACCEL_BUILD_DIR:-$root/build}"
jobs="${ACCEL_BUILD_JOBS:-$(nproc)}"
# Let ccache hit across clones in different directories (CI clones afresh each time).
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$root}"
export CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"
# Ninja compiles a target's files while the libraries it links are still being built (make waits
# for each library first), which keeps both cores busy through accel's chain of libraries.
generator=()
if command -v ninja > /dev/null; then generator=(-G Ninja); fi
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@"
fi
targets=()
for t in ${ACCEL_BUILD_TARGETS:-}; do targets+=(--target "$t"); done
cmake --build "$build" -j "$jobs" "${targets[@]}"
