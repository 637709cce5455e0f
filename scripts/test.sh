#!/usr/bin/env bash
# The README's second command: installs dependencies, builds, and runs the whole test suite.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${ACCEL_BUILD_DIR:-$root/build}"
t0=$(date +%s)
bash "$root/scripts/setup.sh" --tests
t1=$(date +%s)
bash "$root/scripts/build.sh"
t2=$(date +%s)
cd "$build"
ctest --output-on-failure -j "$(nproc)" "$@"
t3=$(date +%s)
echo "timings: setup $((t1 - t0)) s, build $((t2 - t1)) s, tests $((t3 - t2)) s"
