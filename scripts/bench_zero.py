#!/usr/bin/env python3
"""Benchmark: deepspeed ZeRO stages 0-3 at several world sizes, measured against the estimate and theory.

For every stage and world size it runs `accel launch` on one GPT (sized so that model states
dominate: --n-layer 8 --n-embd 384 by default, micro batch 1 x 64 tokens) and reads:
  - per rank, the model-state bytes the backend holds (<output_dir>/report/rank_<r>.json, from the
    storage of its own tensors: parameters, gradients, gradient shard, fp32 master, optimizer states,
    peak transient unit buffers), next to `accel estimate-memory --json` for the same job;
  - communication per training step from the communicator counters (bus bytes: nccl-tests'
    convention, (n-1)/n of the payload for reduce-scatter and all-gather, 2(n-1)/n for all-reduce),
    next to the ZeRO paper's theory: 2 x params x (n-1)/n for stages 0-2 and 3 x for stage 3, in the
    communicated dtype (the embedding, tied with the output head, is gathered once per step, not
    twice, so stage 3 sits just under 3x);
  - step time (median over the timed steps) and tokens/s.
The engine is configured so that transient buffers are one unit: reduce_bucket_size,
stage3_max_live_parameters and stage3_prefetch_bucket_size equal one block's values, and
stage3_param_persistence_threshold is 0. Prints a markdown table and writes --json. It asserts
nothing (tests do); the timings need an otherwise idle machine.

  scripts/python scripts/bench_zero.py --worlds 1,2,4 --json /tmp/bench_zero.json
  scripts/python scripts/bench_zero.py --worlds 2 --stages 0,3 --steps 10     # stage 3 vs 0 timing
  scripts/python scripts/bench_zero.py --worlds 2 --stages 2 --offload nvme   # NVMe optimizer offload
  scripts/python scripts/bench_zero.py --worlds 2 --stages 3 --offload nvme --offload-param nvme  # + parameters
  scripts/python scripts/bench_zero.py --backend fsdp --worlds 4 --stages 3,h  # HYBRID_SHARD, 2 machines x 2

Stage `h` (with --backend fsdp) is HYBRID_SHARD over --machines launchers on loopback, each running
world / machines ranks: FULL_SHARD within a machine, the gradient shards all-reduced across machines.
Its theory is 3 x params x (g-1)/g within the machine (g ranks) plus 2 x params/g x (m-1)/m across
the m machines; the run report counts both groups' traffic.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import socket
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
COMPONENTS = ("params", "grads", "grad_shard", "master", "optimizer_states")
FSDP_STRATEGY = {"0": "NO_SHARD", "2": "SHARD_GRAD_OP", "3": "FULL_SHARD",  # --backend fsdp: the stage with its memory
                 "h": "HYBRID_SHARD"}


def block_numel(n_embd: int) -> int:
    return 12 * n_embd * n_embd + 13 * n_embd


def machines_of(a, stage: str) -> int:
    return a.machines if stage == "h" else 1


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_job(a, d: str, stage: str, world: int) -> str:
    unit = block_numel(a.n_embd)
    offload = ""
    if a.offload == "nvme":
        offload = f"offload_optimizer_device: nvme, offload_optimizer_nvme_path: {d}/nvme, "
    if a.offload_param == "nvme":  # stage 3: parameter shards in files, staged for each gather
        offload += f"offload_param_device: nvme, offload_param_nvme_path: {d}/param_nvme, "
    bounds = (f"reduce_bucket_size: {unit}, stage3_max_live_parameters: {unit}, stage3_prefetch_bucket_size: {unit}, "
              "stage3_param_persistence_threshold: 0")
    if a.deepspeed_defaults:  # DeepSpeed's own defaults: prefetch ahead, large buckets (timing runs)
        bounds = "stage3_param_persistence_threshold: 0"
    backend_block = f"deepspeed: {{zero_stage: {stage}, {offload}{bounds}}}"
    if a.backend == "fsdp":
        backend_block = (f"fsdp: {{sharding_strategy: {FSDP_STRATEGY[stage]}, backward_prefetch: BACKWARD_PRE, "
                         "limit_all_gathers: true}")
    job = os.path.join(d, "job.yaml")
    with open(job, "w") as f:
        f.write(f"""backend: {a.backend}
num_processes: {world}
num_machines: {machines_of(a, stage)}
device: cpu
main_process_ip: 127.0.0.1
main_process_port: {free_port() if machines_of(a, stage) > 1 else 0}
mixed_precision: "{a.mixed_precision}"
{backend_block}
model: {{name: gpt, n_layer: {a.n_layer}, n_head: {a.n_head}, n_embd: {a.n_embd}, vocab_size: {a.vocab_size}, block_size: {a.seq_len}}}
data: {{kind: synthetic}}
optimizer: {{name: adamw, lr: 1.0e-3}}
training: {{max_steps: {a.warmup_steps + a.steps}, micro_batch_size: {a.micro_batch}, seq_len: {a.seq_len},
  output_dir: {d}/run, resume: never, save_weights: false, log_every: 1000, checkpoint_every: 0}}
""")
    return job


def estimate(a, job: str, stage: str) -> dict:
    path = job + ".estimate.json"
    p = subprocess.run([a.accel, "estimate-memory", job, "--json", path], capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"accel estimate-memory failed:\n{p.stderr}")
    with open(path) as f:
        rows = json.load(f)["strategies"]
    want = "ddp / zero-0" if stage == "0" else f"zero-{stage}"
    if a.backend == "fsdp":
        want = FSDP_STRATEGY[stage]
    row = next(r for r in rows if r["name"] == want)
    return row


def launch(a, job: str, stage: str, world: int) -> None:
    """One launcher, or --machines launchers on loopback (HYBRID_SHARD), all waited for."""
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
    machines = machines_of(a, stage)
    # Several machines: the job names a free loopback port (port 0 works on one machine only), and
    # every launcher reads one job secret (SECURITY.md), a 0600 file beside the job.
    if machines > 1:
        secret = os.path.join(os.path.dirname(job), "secret")
        if not os.path.exists(secret):
            fd = os.open(secret, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
            os.write(fd, os.urandom(32))
            os.close(fd)
        env["ACCEL_SECRET_FILE"] = secret
    commands = [[a.accel, "launch", job, "--set", f"machine_rank={m}"] for m in range(machines)]
    procs = [subprocess.Popen(c, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for c in commands]
    errors = [p.communicate()[1] for p in procs]
    failed = [f"machine {m}:\n{err[-3000:]}" for m, (p, err) in enumerate(zip(procs, errors)) if p.returncode != 0]
    if failed:
        sys.exit(f"accel launch failed (stage {stage}, world {world}):\n" + "\n".join(failed))


def run_one(a, stage: str, world: int) -> dict:
    with tempfile.TemporaryDirectory(prefix=f"bench_zero_s{stage}_w{world}_") as d:
        job = write_job(a, d, stage, world)
        est = estimate(a, job, stage)
        launch(a, job, stage, world)
        with open(os.path.join(d, "run", "metrics.jsonl")) as f:
            metrics = [json.loads(line) for line in f if line.strip()]
        reports = []
        for r in range(world):
            with open(os.path.join(d, "run", "report", f"rank_{r}.json")) as f:
                reports.append(json.load(f))
    timed = [m for m in metrics if m["step"] >= a.warmup_steps]
    mem = reports[0]["memory"]
    # Model states the engine holds, summed like the estimate's per-rank device figure.
    measured = sum(mem.get(k, 0) for k in COMPONENTS) + mem.get("param_shards", 0) + \
        mem.get("live_params_peak", 0) + mem.get("live_grads_peak", 0)
    measured += mem.get("nvme_buffer_bytes", 0)  # nvme: the staging buffers of a step (states are in files)
    est_total = est["bytes"]["device"] + est["bytes"]["host"]
    comm = reports[0]["comm_per_step"]
    return {
        "stage": stage, "world": world,
        "measured_bytes": measured, "measured": {k: mem.get(k, 0) for k in list(COMPONENTS) + ["param_shards", "live_params_peak", "live_grads_peak", "nvme_bytes", "nvme_buffer_bytes"]},
        "estimate_bytes": est_total, "estimate": est,
        "comm_bus_bytes_per_step": comm["bus_bytes"], "comm_by_kind": comm["by_kind"],
        "step_time_s": statistics.median(m["step_time_s"] for m in timed),
        "tokens_per_s": sum(m["tokens"] for m in timed) / sum(m["step_time_s"] for m in timed),
        "peak_rss_bytes": max(r["peak_rss_bytes"] for r in reports),
        "rss_bytes_at_end": max(r["rss_bytes_at_end"] for r in reports),
        "final_loss": metrics[-1]["loss"],
    }


def theory_bus_bytes(a, stage: str, world: int, numel: int) -> float:
    if world == 1:
        return 0.0
    dtype_bytes = 2 if a.mixed_precision in ("bf16", "fp16") else 4
    if stage == "h":
        m = a.machines
        g = world // m
        return (3.0 * numel * (g - 1) / g + 2.0 * numel / g * (m - 1) / m) * dtype_bytes
    factor = 3.0 if stage == "3" else 2.0
    return factor * numel * dtype_bytes * (world - 1) / world


def model_numel(a) -> int:
    return (a.vocab_size + a.seq_len) * a.n_embd + a.n_layer * block_numel(a.n_embd) + 2 * a.n_embd


def mib(b: float) -> str:
    return f"{b / 2**20:.1f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--accel", default=os.path.join(ROOT, "build", "accel"))
    ap.add_argument("--worlds", default="1,2,4")
    ap.add_argument("--stages", default="0,1,2,3")
    ap.add_argument("--n-layer", type=int, default=8)
    ap.add_argument("--n-head", type=int, default=6)
    ap.add_argument("--n-embd", type=int, default=384)
    ap.add_argument("--vocab-size", type=int, default=256)
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--micro-batch", type=int, default=1)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--warmup-steps", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS per rank")
    ap.add_argument("--mixed-precision", default="no", choices=("no", "bf16"))
    ap.add_argument("--offload", default="none", choices=("none", "nvme"))
    ap.add_argument("--offload-param", default="none", choices=("none", "nvme"), help="stage 3 only")
    ap.add_argument("--backend", default="deepspeed", choices=("deepspeed", "fsdp"),
                    help="fsdp: stages 0, 2, 3 run as NO_SHARD, SHARD_GRAD_OP, FULL_SHARD (BACKWARD_PRE, "
                         "limit_all_gathers); no offload")
    ap.add_argument("--deepspeed-defaults", action="store_true",
                    help="leave reduce_bucket_size and the stage-3 prefetch/live bounds at DeepSpeed's defaults "
                         "(gathers are prefetched; transient memory is then larger than the one-unit estimate)")
    ap.add_argument("--machines", type=int, default=2, help="launchers on loopback for stage h (HYBRID_SHARD)")
    ap.add_argument("--json", help="write every figure here")
    a = ap.parse_args()
    stages = a.stages.split(",")
    for stage in stages:
        allowed = ("0", "2", "3", "h") if a.backend == "fsdp" else ("0", "1", "2", "3")
        if stage not in allowed:
            ap.error(f"--stages: {stage!r} is not one of {', '.join(allowed)} for --backend {a.backend}")
    numel = model_numel(a)
    rows = []
    for world in [int(w) for w in a.worlds.split(",")]:
        for stage in stages:
            if machines_of(a, stage) > 1 and world % a.machines != 0:
                ap.error(f"stage h at world {world}: --machines {a.machines} must divide the world")
            r = run_one(a, stage, world)
            r["theory_bus_bytes_per_step"] = theory_bus_bytes(a, stage, world, numel)
            rows.append(r)
            print(f"stage {stage} world {world}: measured {mib(r['measured_bytes'])} MiB, estimate "
                  f"{mib(r['estimate_bytes'])} MiB, comm {mib(r['comm_bus_bytes_per_step'])} MiB/step", file=sys.stderr)
    print(f"\nbackend {a.backend}; GPT {a.n_layer} x {a.n_embd}, {numel:,} parameters, mixed_precision {a.mixed_precision}, "
          f"offload {a.offload}, offload_param {a.offload_param}; micro batch {a.micro_batch} x {a.seq_len} tokens; rank 0's figures\n")
    print("| stage | world | model states measured (MiB) | estimate (MiB) | diff | comm/step measured (MiB) "
          "| theory (MiB) | diff | step time (ms) | tokens/s | peak RSS (MiB) | RSS at end (MiB) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        md = (r["measured_bytes"] - r["estimate_bytes"]) / r["estimate_bytes"]
        th = r["theory_bus_bytes_per_step"]
        cd = f"{(r['comm_bus_bytes_per_step'] - th) / th:+.1%}" if th > 0 else "-"
        label = FSDP_STRATEGY[r["stage"]] if a.backend == "fsdp" else r["stage"]
        world = f"{r['world']} ({a.machines} x {r['world'] // a.machines})" if r["stage"] == "h" else r["world"]
        print(f"| {label} | {world} | {mib(r['measured_bytes'])} | {mib(r['estimate_bytes'])} | {md:+.1%} "
              f"| {mib(r['comm_bus_bytes_per_step'])} | {mib(th)} | {cd} | {r['step_time_s'] * 1e3:.0f} "
              f"| {r['tokens_per_s']:.0f} | {mib(r['peak_rss_bytes'])} | {mib(r['rss_bytes_at_end'])} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"config": vars(a), "num_parameters": numel, "rows": rows}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
