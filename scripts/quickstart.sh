#!/usr/bin/env bash
# The README's first command: installs dependencies, builds, and launches the main job.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${ACCEL_BUILD_DIR:-$root/build}"
bash "$root/scripts/setup.sh"
bash "$root/scripts/build.sh"
cd "$root"
# resume=never: the demo trains from scratch on every run (a real job keeps `auto` and continues
# from runs/quickstart/checkpoints/latest).
exec "$build/accel" launch config_templates/quickstart.yaml --set training.resume=never "$@"
