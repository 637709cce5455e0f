#!/usr/bin/env bash
# The README's second command: installs dependencies, builds, and runs the whole test suite.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${ACCEL_BUILD_DIR:-$root/build}"
t0=$(date +%s)
# What the build needs (Debian's build packages and torch; nothing to do after the quickstart) first,
# then what only the tests need (the test tools, the Python peers: mostly downloads, unpacking and
# deepspeed's source build) beside the build, which needs none of it.
bash "$root/scripts/setup.sh"
mkdir -p "$build"
setup_log="$build/setup-tests.log"
bash "$root/scripts/setup.sh" --tests > "$setup_log" 2>&1 &
setup_pid=$!
trap 'kill $setup_pid 2> /dev/null || true' EXIT
t1=$(date +%s)
bash "$root/scripts/build.sh"
t2=$(date +%s)
if ! wait $setup_pid; then
  cat "$setup_log"; echo "test: scripts/setup.sh --tests failed (output above, also in $setup_log)" >&2; exit 1
fi
trap - EXIT
grep '^setup:' "$setup_log" || true
t3=$(date +%s)
cd "$build"
ctest --output-on-failure -j "$(nproc)" "$@"
t4=$(date +%s)
echo "timings: setup $((t1 - t0)) s, build $((t2 - t1)) s (the tests' setup beside it: waited $((t3 - t2)) s more), tests $((t4 - t3)) s"
