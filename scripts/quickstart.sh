#!/usr/bin/env bash
# The README's first command: installs dependencies, builds accel and accel-worker (not the tests),
# and launches the main job.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${ACCEL_BUILD_DIR:-$root/build}"
t0=$(date +%s)
bash "$root/scripts/setup.sh"
t1=$(date +%s)
# Only what the job runs: the launcher and the worker (and the CUDA plugin where a GPU is visible);
# scripts/test.sh and a plain scripts/build.sh build the rest.
targets=accel
if command -v nvidia-smi > /dev/null && nvidia-smi -L > /dev/null 2>&1; then targets="accel accel_cuda"; fi
ACCEL_BUILD_TARGETS="$targets" bash "$root/scripts/build.sh"
t2=$(date +%s)
echo "timings: setup $((t1 - t0)) s, build $((t2 - t1)) s"
cd "$root"
# resume=never: the demo trains from scratch on every run (a real job keeps `auto` and continues
# from runs/quickstart/checkpoints/latest).
exec "$build/accel" launch config_templates/quickstart.yaml --set training.resume=never "$@"
