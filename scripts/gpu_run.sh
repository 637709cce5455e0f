#!/usr/bin/env bash
# The whole GPU check in one command on a lent GPU machine, against binaries staged here by
# scripts/gpu_stage.sh (the device builds nothing). A lease is 15 minutes of device time in all, the
# machine's start included, and one command at most 10, so every step runs under its own timeout and
# the whole fits in about 7 minutes:
#   1. facts: nvidia-smi, the device's torch against the one the binaries were built with (stops
#      with exit 2 when they differ), the staged programs' linkage, `accel env`;
#   2. alone on the GPU: the GPT-2 124M benchmark (scripts/bench_gpu.py), each contender under a
#      timeout, the plain loss against the chunked one (scripts/bench_chunked_loss.py), where its step and accel's zero-3 step spend GPU time (scripts/profile_gpu_step.py,
#      accel's through `accel launch --profile`), and the memory
#      estimate against measured peaks (scripts/bench_gpu_memory.py, about 95 s; --memory-only runs
#      just this step, GPU_RUN_MEMORY_CASES=a,b picks its cases);
#   3. at once: the communicator tests (tests/gpu/test_cuda_communicators), each test of
#      tests/gpu/test_cuda_engine.py in its own process, and the smoke runs (`accel test` over NCCL
#      at world 1 and over host-staged Gloo at world 2, `accel bench comm` over NCCL);
#   4. $OUT/summary.json (scripts/gpu_summary.py: each step's exit code, status and seconds, every
#      accuracy figure with the tensor it came from, tokens/s, MFU, peak memory, ratios),
#      $OUT/bench-gpu.{json,md} and $OUT/logs.tar.gz.
# --rehearse runs the same steps on a machine without a GPU (the ctest gpu_rehearsal): the GPU tests
# report "skipped: no GPU", the smoke runs and the benchmark take their CPU form.
#   device:  run carry [.gpu-stage], command: timeout 570 bash scripts/gpu_run.sh
#   here:    OUT=/tmp/rehearsal bash scripts/gpu_run.sh --rehearse [--stage DIR]
# Exit status: 0 when every step passed (or was skipped in a rehearsal), 1 otherwise, 2 when the
# staged binaries cannot run here.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
stage="$root/.gpu-stage"
rehearse=0
bench=1
memory_only=0
while [ $# -gt 0 ]; do
  case "$1" in
    --rehearse) rehearse=1 ;;
    --no-bench) bench=0 ;;
    --memory-only) memory_only=1 ;;
    --stage) stage="$2"; shift ;;
    *) echo "gpu_run: unknown argument $1 (--rehearse, --no-bench, --memory-only, --stage DIR)" >&2; exit 2 ;;
  esac
  shift
done
stage="$(cd "$stage" 2>/dev/null && pwd)" || { echo "gpu_run: no staged folder: run scripts/gpu_stage.sh here first" >&2; exit 2; }
out="${OUT:-$root/gpu-run-out}"
mkdir -p "$out"
work="$(mktemp -d "${TMPDIR:-/tmp}/accel-gpu-run.XXXXXX")"
logs="$work/logs"
mkdir -p "$logs"
steps="$logs/steps.tsv"
: >"$steps"
if [ $rehearse -eq 1 ]; then
  python="${ACCEL_PYTHON:-${ACCEL_VENV:-$HOME/.cache/accel/venv-torch2.11}/bin/python}"
else
  python="$(command -v python3)"
fi
export PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 NCCL_DEBUG="${NCCL_DEBUG:-WARN}"
started=$(date +%s)
say() { echo "[gpu_run +$(($(date +%s) - started))s] $*"; }

# step NAME TIMEOUT_S CMD...: runs CMD with its output in logs/NAME.log and appends
# "NAME rc seconds" to steps.tsv (rc 124: over its timeout; 77: skipped, no GPU).
step() {
  local name="$1" limit="$2"
  shift 2
  local t0
  t0=$(date +%s%N)
  timeout -k 5 "$limit" "$@" >"$logs/$name.log" 2>&1
  local rc=$?
  local ms=$((($(date +%s%N) - t0) / 1000000))
  printf '%s\t%s\t%d.%03d\n' "$name" "$rc" $((ms / 1000)) $((ms % 1000)) >>"$steps"
  say "$name: exit $rc"
  return $rc
}

finish() {
  say "summary"
  "$python" "$root/scripts/gpu_summary.py" --logs "$logs" --stage "$stage" --out "$out/summary.json" \
    $([ $rehearse -eq 1 ] && echo --rehearse)
  local rc=$?
  tar -czf "$out/logs.tar.gz" -C "$work" logs
  rm -rf "$work"
  say "done: exit $rc ($out)"
  exit $rc
}

# 1. Facts, and whether the staged programs can run here at all.
say "facts (stage $stage, python $python)"
{
  date -u
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1 || echo "nvidia-smi: none"
  nproc
  free -g | head -2
} >"$logs/machine.log" 2>&1
torch_dir="$("$python" -c 'import os, torch; print(os.path.dirname(torch.__file__))' 2>"$logs/torch.log")"
built="$(cat "$stage/torch_build.txt")"
here="$("$python" -c 'import torch; print(torch.__version__, torch.version.git_version)' 2>>"$logs/torch.log")"
if [ -z "$torch_dir" ] || [ "$here" != "$built" ]; then
  echo "gpu_run: the staged binaries were built against torch '$built', but $python has '${here:-no torch}': stage again with that wheel (scripts/setup.sh pins it)" | tee "$logs/torch_mismatch.log" >&2
  printf 'torch_check\t2\t0\n' >>"$steps"
  finish
fi
# Libraries gpu_stage.sh compressed (lib/*.xz), unpacked outside the staged folder (it may be read-only).
unpacked="$(mktemp -d "${TMPDIR:-/tmp}/accel-gpu-lib.XXXXXX")"
for packed in "$stage"/lib/*.xz; do
  [ -e "$packed" ] || continue
  "$python" -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' \
    "$packed" "$unpacked/$(basename "${packed%.xz}")"
done
export LD_LIBRARY_PATH="$unpacked:$stage/lib:$torch_dir/lib:$(dirname "$torch_dir")/nvidia/cu13/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
accel="$stage/bin/accel"
if ldd "$stage"/bin/* "$stage"/lib/*.so* 2>&1 | tee "$logs/ldd.log" | grep -q "not found"; then
  echo "gpu_run: a staged program misses a shared library here (ldd.log)" >&2
  printf 'linkage\t2\t0\n' >>"$steps"
  finish
fi
printf 'linkage\t0\t0\n' >>"$steps"
step accel_env 60 "$accel" env

# 2. The benchmark and the step profile, first and alone on the GPU (--no-bench: the profile only).
say "benchmark"
bench_args=(--accel "$accel" --json "$logs/bench_gpu.json" --markdown "$logs/bench_gpu.md" --timeout 35)
profile_args=(--json "$logs/profile_gpu_step.json")
accel_profile_args=(--accel "$accel" --strategy accel-zero3 --json "$logs/profile_accel_step.json")
if [ $rehearse -eq 1 ]; then
  bench_args+=(--dry-run)
  profile_args+=(--dry-run)
  accel_profile_args+=(--dry-run)
else
  bench_args+=(--steps 15 --warmup 5 --repeat 2)
fi
# The memory estimate's step peak against the GPU's measured peaks (scripts/bench_gpu_memory.py).
memory_args=(--accel "$accel" --json "$logs/bench_gpu_memory.json")
[ $rehearse -eq 1 ] && memory_args+=(--dry-run)
# GPU_RUN_MEMORY_CASES: comma-separated cases of it (default: its DEFAULT_CASES; a rehearsal, where
# the figures mean nothing, two of them: one sharded, one offloaded).
[ $rehearse -eq 1 ] && : "${GPU_RUN_MEMORY_CASES:=389M zero3,389M zero3 offload cpu}"
[ -n "${GPU_RUN_MEMORY_CASES:-}" ] && memory_args+=(--only "$GPU_RUN_MEMORY_CASES")
if [ $memory_only -eq 1 ]; then
  step bench_gpu_memory "${GPU_RUN_MEMORY_LIMIT_S:-300}" "$python" "$root/scripts/bench_gpu_memory.py" "${memory_args[@]}"
  cp "$logs/bench_gpu_memory.json" "$out/bench-gpu-memory.json" 2>/dev/null
  cat "$logs/bench_gpu_memory.log"
  finish
fi
# The loss over the vocabulary, plain against chunked (scripts/bench_chunked_loss.py --gpu: GPT-2
# 124M, bf16, 16 x 1024 tokens; three launches of about 20 s).
chunked_args=(--accel "$accel" --json "$logs/bench_chunked_loss.json" --timeout 60)
if [ $rehearse -eq 1 ]; then chunked_args+=(--dry-run); else chunked_args+=(--gpu); fi
if [ $bench -eq 1 ]; then
  step bench_gpu 330 "$python" "$root/scripts/bench_gpu.py" "${bench_args[@]}"
  cp "$logs/bench_gpu.json" "$out/bench-gpu.json" 2>/dev/null
  cp "$logs/bench_gpu.md" "$out/bench-gpu.md" 2>/dev/null
  step bench_chunked_loss 150 "$python" "$root/scripts/bench_chunked_loss.py" "${chunked_args[@]}"
  cp "$logs/bench_chunked_loss.json" "$out/bench-chunked-loss.json" 2>/dev/null
fi
step profile_gpu_step 90 "$python" "$root/scripts/profile_gpu_step.py" "${profile_args[@]}"
cp "$logs/profile_gpu_step.json" "$out/profile-gpu-step.json" 2>/dev/null
# The same model and batch through accel's trainer (zero 3) under `accel launch --profile`.
# Its JSON comes back in summary.json (accel_step_profile) and logs.tar.gz.
step profile_accel_step 120 "$python" "$root/scripts/profile_gpu_step.py" "${accel_profile_args[@]}"
if [ $bench -eq 1 ]; then
  step bench_gpu_memory 240 "$python" "$root/scripts/bench_gpu_memory.py" "${memory_args[@]}"
  cp "$logs/bench_gpu_memory.json" "$out/bench-gpu-memory.json" 2>/dev/null
fi
# 3. The GPU tests and the smoke runs, at once (each in its own process: CUDA contexts share the GPU;
#    each smoke run in its own output_dir, since one launch holds its directory).
# OMP_NUM_THREADS: the engine tests' CPU runs and reference share the cores with each other.
# ACCEL_BINARY goes to the engine tests only: accel itself refuses ACCEL_* variables it does not know.
say "tests and smoke runs, in parallel"
export OMP_NUM_THREADS=2
step communicators 150 "$stage/bin/test_cuda_communicators" --durations yes &
for t in world1_fp32_every_strategy world1_every_op_through_nccl world2_on_one_gpu_through_host_staged_gloo \
         optimizer_offload_to_cpu_and_nvme parameter_offload_to_cpu_and_nvme bf16_follows_the_cpu_bf16_run \
         fp16_follows_the_cpu_fp16_run; do
  (cd "$root/tests/gpu" && ACCEL_BINARY="$accel" ACCEL_PYTHON="$python" \
    step "engine_$t" 170 "$python" test_cuda_engine.py -v "CudaEngine.test_$t") &
done
smoke_job="$work/smoke.yaml"
# examples/llama builds its model in accel::ShardedInit and leaves it on the host: prepare() places
# the slices and the root on the device (docs/design/0023). An llm.c token file of random tokens.
"$python" -c 'import array, random, sys
r = random.Random(0)
with open(sys.argv[1], "wb") as f:
    array.array("i", [20240520, 1, 40000] + [0] * 253).tofile(f)
    array.array("H", [r.randrange(256) for _ in range(40000)]).tofile(f)' "$work/tokens.bin"
llama_job="$work/llama.yaml"
printf 'program: [%s, %s]\nbackend: deepspeed\ndeepspeed: {zero_stage: 3, stage3_param_persistence_threshold: 0}\nmain_process_port: 0\ncollective_timeout_s: 60\ntraining: {max_steps: 3, micro_batch_size: 4, output_dir: %s}\n' \
  "$stage/bin/accel_example_llama" "$work/tokens.bin" "$work/llama" >"$llama_job"
if [ $rehearse -eq 1 ]; then
  printf 'backend: ddp\ndevice: cpu\nmain_process_port: 0\ncollective_timeout_s: 60\n' >"$smoke_job"
  step smoke_test_cpu_world2 90 "$accel" test "$smoke_job" --set "training.output_dir=$work/smoke_test_cpu_world2" --set num_processes=2 &
  step smoke_bench_comm_cpu_world2 90 "$accel" bench comm "$smoke_job" --set "training.output_dir=$work/smoke_bench_comm_cpu_world2" --set num_processes=2 --json "$logs/bench_comm.json" &
  step smoke_llama_sharded_init 120 "$accel" launch "$llama_job" --set device=cpu --set num_processes=2 &
else
  printf 'backend: ddp\ndevice: cuda\nmain_process_port: 0\ncollective_timeout_s: 60\n' >"$smoke_job"
  step smoke_test_nccl_world1 90 "$accel" test "$smoke_job" --set "training.output_dir=$work/smoke_test_nccl_world1" --set num_processes=1 &
  ACCEL_NCCL_ISSUE_AT_WORLD_ONE=1 step smoke_test_nccl_world1_issued 90 "$accel" test "$smoke_job" --set "training.output_dir=$work/smoke_test_nccl_world1_issued" --set num_processes=1 &
  step smoke_test_staged_world2 90 "$accel" test "$smoke_job" --set "training.output_dir=$work/smoke_test_staged_world2" --set num_processes=2 --set cuda_collectives=gloo &
  ACCEL_NCCL_ISSUE_AT_WORLD_ONE=1 step smoke_bench_comm_nccl_world1 90 "$accel" bench comm "$smoke_job" --set "training.output_dir=$work/smoke_bench_comm_nccl_world1" \
    --set num_processes=1 --json "$logs/bench_comm.json" &
  step smoke_llama_sharded_init 120 "$accel" launch "$llama_job" --set "training.output_dir=$work/llama_world1" --set device=cuda --set num_processes=1 &
  # Asynchronous checkpoints from a GPU: the state copied to pinned host memory on a side stream.
  step smoke_llama_async_checkpoint 120 "$accel" launch "$llama_job" --set "training.output_dir=$work/llama_async" \
    --set training.async_checkpoint=true --set device=cuda --set num_processes=1 &
  step smoke_llama_sharded_init_staged_world2 120 "$accel" launch "$llama_job" --set "training.output_dir=$work/llama_world2" --set device=cuda --set num_processes=2 \
    --set cuda_collectives=gloo &
fi
wait

finish
