#!/usr/bin/env bash
# The GPU check's rehearsal (ctest gpu_rehearsal): stages this build's binaries the way
# scripts/gpu_stage.sh does for a lease, runs scripts/gpu_run.sh --rehearse against them, and checks
# the summary lists every step, passed or skipped for want of a GPU, so the one-call GPU run cannot
# rot between leases. Usage: rehearse_gpu_run.sh BUILD_DIR
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
tmp="$(mktemp -d "${TMPDIR:-/tmp}/accel-gpu-rehearsal.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
ACCEL_BUILD_DIR="$1" bash "$root/scripts/gpu_stage.sh" --no-build "$tmp/stage"
size=$(du -sb "$tmp/stage" | cut -f1)
if [ "$size" -gt $((32 * 1024 * 1024)) ]; then
  echo "rehearsal: the staged folder is $size bytes, over 32 MiB (a device call carries 64 MiB in all)" >&2
  exit 1
fi
OUT="$tmp/out" bash "$root/scripts/gpu_run.sh" --rehearse --stage "$tmp/stage"
"${ACCEL_PYTHON:-python3}" - "$tmp/out" <<'PY'
import json, os, sys
out = sys.argv[1]
s = json.load(open(os.path.join(out, "summary.json")))
want = {"linkage", "accel_env", "communicators", "smoke_test_cpu_world2", "smoke_bench_comm_cpu_world2", "bench_gpu",
        "smoke_llama_sharded_init", "profile_gpu_step", "profile_accel_step", "bench_gpu_memory",
        "bench_chunked_loss"}
got = {st["step"] for st in s["steps"]}
engine = {n for n in got if n.startswith("engine_")}
problems = [f"missing steps {sorted(want - got)}"] if want - got else []
if len(engine) < 7:
    problems.append(f"only {len(engine)} engine test steps: {sorted(engine)}")
problems += [f"{st['step']}: {st['status']}" for st in s["steps"] if st["status"] not in ("passed", "skipped: no GPU")]
rows = [r for r in s["benchmark"]["results"] if "error" not in r]
if len(rows) < 6:
    problems.append(f"the dry-run benchmark measured {len(rows)} contenders, not accel's 6")
for key in ("step_profile", "accel_step_profile"):
    if not (s.get(key) or {}).get("ms_per_step_by_kind"):
        problems.append(f"no {key} in summary.json")
if len([r for r in s.get("memory") or [] if "error" not in r]) < 2:
    problems.append("the dry-run memory check did not measure its 2 cases")
if not s["passed"]:
    problems.append("summary.json says the rehearsal did not pass")
files = sorted(os.listdir(out))
if len(files) > 8:
    problems.append(f"{len(files)} files in OUT, a device call brings back 8: {files}")
for p in problems:
    print("rehearsal:", p, file=sys.stderr)
sys.exit(1 if problems else 0)
PY
echo "rehearsal: passed"
