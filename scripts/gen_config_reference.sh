#!/usr/bin/env bash
# Regenerates docs/config-reference.md from the schema table (a test fails when they differ).
# Usage: scripts/gen_config_reference.sh [path/to/accel]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
accel="${1:-${ACCEL_BUILD_DIR:-$root/build}/accel}"
{
  printf '# Job file reference\n\n'
  printf 'Generated from the schema table (runtime/config/schema_fields.cpp) by `accel config keys --markdown`;\n'
  printf 'a test fails when the two differ. Every key can also be set with `--set KEY=VALUE` or the environment\n'
  printf 'variable shown. Precedence: defaults < job file < environment < `--set`.\n\n'
  printf 'A job whose `backend` is deepspeed or fsdp but whose settings are in the other block is translated\n'
  printf '(`accel config show JOB --resolved`, `accel config convert JOB --to fsdp|deepspeed`); the mapping is in\n'
  printf 'docs/design/0005-backend-switch.md.\n\n'
  "$accel" config keys --markdown
} > "$root/docs/config-reference.md"
echo "wrote docs/config-reference.md"
