#!/usr/bin/env bash
# The GPU verification, in one command on a lent GPU machine (issue 15): builds accel against the
# torch already installed there, with the Debian packages carried in .gpu-deps/
# (scripts/fetch_gpu_build_deps.sh, run beforehand where a registry is reachable), runs the tests
# labelled `gpu` (the communicators; the trainer on the GPU against the CPU reference), the GPU
# smoke runs (`accel test` over NCCL at world 1 and over host-staged Gloo at world 2 on one GPU,
# `accel bench comm` over NCCL) and the GPT-2 124M benchmark (scripts/bench_gpu.py), and writes logs
# and JSON into $OUT (or ./gpu-check-out).
#   bash scripts/fetch_gpu_build_deps.sh            # here
#   device run, carry [.gpu-deps]: bash scripts/gpu_check.sh
# PYTHON names the interpreter with torch (default: python3). Exit status: 0 when everything passed.
# Phases (arguments; default all): build, test (ctest -L gpu and the smoke runs), bench. A device
# command runs at most 10 minutes, so a lease runs them as three calls; build-gpu/ stays between them.
#   bash scripts/gpu_check.sh build; bash scripts/gpu_check.sh test; bash scripts/gpu_check.sh bench
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${OUT:-$root/gpu-check-out}"
mkdir -p "$out"
python="${PYTHON:-$(command -v python3)}"
prefix="$root/.gpu-deps/root"
build="$root/build-gpu"
status=0
step() { echo; echo "== $*"; }
phases="${*:-build test bench}"
want() { [[ " $phases " == *" $1 "* ]]; }

step "machine"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1 | tee "$out/gpu.txt"
"$python" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'gpus', torch.cuda.device_count())" \
  2>&1 | tee -a "$out/gpu.txt"

step "unpack the carried Debian packages into $prefix"
if ! compgen -G "$root/.gpu-deps/*.deb" >/dev/null; then
  echo "gpu_check: no .deb files in .gpu-deps/: run scripts/fetch_gpu_build_deps.sh where a registry is reachable and carry .gpu-deps" >&2
  exit 2
fi
mkdir -p "$prefix"
for deb in "$root"/.gpu-deps/*.deb; do dpkg -x "$deb" "$prefix"; done
export LD_LIBRARY_PATH="$prefix/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

if want build; then
step "configure and build (log: $out/build.log)"
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
{
  cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DACCEL_PYTHON="$python" -DCMAKE_PREFIX_PATH="$prefix/usr" \
    -DACCEL_GLOO_INCLUDE_DIR="$prefix/usr/include" &&
  cmake --build "$build" -j "$(nproc)"
} >"$out/build.log" 2>&1
rc=$?
tail -5 "$out/build.log"
if [ $rc -ne 0 ]; then
  echo "gpu_check: the build failed (see build.log)" >&2
  exit 1
fi
fi

accel="$build/accel"
if want test; then
step "ctest -L gpu (log: $out/ctest-gpu.log)"
(cd "$build" && ctest -L gpu --output-on-failure --output-junit "$out/ctest-gpu.xml") 2>&1 | tee "$out/ctest-gpu.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1

job="$out/comm-job.yaml"
cat >"$job" <<YAML
backend: ddp
device: cuda
main_process_port: 0
collective_timeout_s: 120
YAML

step "accel test over NCCL, world 1"
"$accel" test "$job" --set num_processes=1 2>&1 | tee "$out/accel-test-nccl.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1

step "accel test over host-staged Gloo, world 2 on one GPU"
"$accel" test "$job" --set num_processes=2 --set cuda_collectives=gloo 2>&1 | tee "$out/accel-test-staged.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1

step "accel bench comm over NCCL, world 1"
"$accel" bench comm "$job" --set num_processes=1 --json "$out/bench-comm-nccl.json" 2>&1 | tee "$out/bench-comm-nccl.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1

fi

if want bench; then
step "GPU benchmark: GPT-2 124M bf16, accel vs FSDP2 and eager (scripts/bench_gpu.py)"
"$python" "$root/scripts/bench_gpu.py" --accel "$accel" --json "$out/bench-gpu.json" --markdown "$out/bench-gpu.md" \
  2>&1 | tee "$out/bench-gpu.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
fi

step "result: $([ $status -eq 0 ] && echo PASSED || echo FAILED)"
exit $status
