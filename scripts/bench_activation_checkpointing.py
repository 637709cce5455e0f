#!/usr/bin/env python3
"""Benchmark: activation memory and step time with and without fsdp.activation_checkpointing.

Runs `accel launch` twice per configuration on one GPT whose activations dominate its memory (long
sequences, a micro batch of several rows, a small model: --n-layer 8 --n-embd 256 --n-head 8,
micro batch 4 x 512 tokens by default) with `fsdp.activation_checkpointing` false and true, and reads:
  - peak RSS per rank (<output_dir>/report/rank_<r>.json, getrusage's high-water mark, so it includes
    the process's fixed footprint: libtorch, the data, the model states), max over ranks;
  - the model states the backend holds (same report, `memory`), which checkpointing must not change;
  - step time: median of metrics.jsonl's step_time_s over the steps after --warmup-steps.
The drop in peak RSS is the activation memory checkpointing saves; what remains of the activations
is each Block's input plus one Block's activations while it is recomputed. The recompute costs
about one more forward per step (a forward is about a third of a training step).
Also prints the rough no-recompute activation figure `accel estimate-memory` gives (Korthikanti et
al. 2022, 16-bit; doubled for these fp32 runs). Prints a markdown table and writes --json. It asserts
nothing (tests do); the timings need an otherwise idle machine.

  scripts/python scripts/bench_activation_checkpointing.py --repeat 3 --json /tmp/bench_ac.json
  scripts/python scripts/bench_activation_checkpointing.py --world 2 --strategy SHARD_GRAD_OP --threads 1
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
STATE_KEYS = ("params", "param_shards", "grads", "grad_shard", "master", "optimizer_states", "live_params_peak",
              "live_grads_peak")


def write_job(a, d: str, checkpointing: bool) -> str:
    job = os.path.join(d, "job.yaml")
    with open(job, "w") as f:
        f.write(f"""backend: fsdp
num_processes: {a.world}
device: cpu
main_process_port: 0
mixed_precision: "{a.mixed_precision}"
fsdp: {{sharding_strategy: {a.strategy}, activation_checkpointing: {str(checkpointing).lower()}}}
model: {{name: gpt, n_layer: {a.n_layer}, n_head: {a.n_head}, n_embd: {a.n_embd}, vocab_size: {a.vocab_size}, block_size: {a.seq_len}}}
data: {{kind: synthetic}}
optimizer: {{name: adamw, lr: 1.0e-3}}
training: {{max_steps: {a.warmup_steps + a.steps}, micro_batch_size: {a.micro_batch}, seq_len: {a.seq_len},
  output_dir: {d}/run, resume: never, save_weights: false, log_every: 1000, checkpoint_every: 0, eval_every: 0}}
""")
    return job


def run_one(a, checkpointing: bool) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench_ac_") as d:
        job = write_job(a, d, checkpointing)
        env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
        p = subprocess.run([a.accel, "launch", job], env=env, capture_output=True, text=True)
        if p.returncode != 0:
            sys.exit(f"accel launch failed (activation_checkpointing {checkpointing}):\n{p.stderr[-3000:]}")
        with open(os.path.join(d, "run", "logs", "rank_0.log")) as f:
            noted = "activation_checkpointing: each Block" in f.read()
        if noted != checkpointing:
            sys.exit(f"the start-up log does not match activation_checkpointing {checkpointing}")
        with open(os.path.join(d, "run", "metrics.jsonl")) as f:
            metrics = [json.loads(line) for line in f if line.strip()]
        reports = []
        for r in range(a.world):
            with open(os.path.join(d, "run", "report", f"rank_{r}.json")) as f:
                reports.append(json.load(f))
        est = subprocess.run([a.accel, "estimate-memory", job, "--json", os.path.join(d, "est.json")],
                             capture_output=True, text=True)
        activations = {}
        if est.returncode == 0:
            with open(os.path.join(d, "est.json")) as f:
                activations = json.load(f).get("activations", {})
    timed = [m for m in metrics if m["step"] >= a.warmup_steps]
    return {
        "activation_checkpointing": checkpointing,
        "peak_rss_bytes": max(r["peak_rss_bytes"] for r in reports),
        "model_state_bytes": sum(reports[0]["memory"].get(k, 0) for k in STATE_KEYS),
        "step_time_s": statistics.median(m["step_time_s"] for m in timed),
        "step_times_s": [m["step_time_s"] for m in timed],
        "losses": [m["loss"] for m in metrics],
        "estimate_activations_16bit_bytes": activations.get("total_16bit_bytes"),
    }


def combine(runs: list) -> dict:
    """Repeats of one setting: the medians of their peak RSS and of their median step times."""
    out = dict(runs[0])
    out["step_time_s"] = statistics.median(r["step_time_s"] for r in runs)
    out["peak_rss_bytes"] = statistics.median(r["peak_rss_bytes"] for r in runs)
    out["repeats"] = [{"step_time_s": r["step_time_s"], "peak_rss_bytes": r["peak_rss_bytes"]} for r in runs]
    return out


def mib(b: float) -> str:
    return f"{b / 2**20:.0f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--accel", default=os.path.join(ROOT, "build", "accel"))
    ap.add_argument("--world", type=int, default=1)
    ap.add_argument("--strategy", default="FULL_SHARD", choices=("FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD"))
    ap.add_argument("--n-layer", type=int, default=8)
    ap.add_argument("--n-head", type=int, default=8)
    ap.add_argument("--n-embd", type=int, default=256)
    ap.add_argument("--vocab-size", type=int, default=256)
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--micro-batch", type=int, default=4)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup-steps", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2, help="OMP_NUM_THREADS per rank")
    ap.add_argument("--mixed-precision", default="no", choices=("no", "bf16"))
    ap.add_argument("--repeat", type=int, default=1, help="runs of each setting, alternating")
    ap.add_argument("--json", help="write every figure here")
    a = ap.parse_args()
    runs = {False: [], True: []}
    for i in range(a.repeat):  # alternating, so a change in machine load hits both alike
        for checkpointing in (False, True):
            r = run_one(a, checkpointing)
            runs[checkpointing].append(r)
            print(f"[{i + 1}/{a.repeat}] activation_checkpointing {str(checkpointing).lower()}: peak RSS "
                  f"{mib(r['peak_rss_bytes'])} MiB, step {r['step_time_s'] * 1e3:.0f} ms", file=sys.stderr)
    rows = [combine(runs[False]), combine(runs[True])]
    stored, recomputed = rows
    same_loss = all(r["losses"] == stored["losses"] for r in runs[False] + runs[True])
    print(f"\nfsdp {a.strategy}, world {a.world}, {a.threads} thread(s) per rank, mixed_precision {a.mixed_precision}; "
          f"GPT {a.n_layer} x {a.n_embd} ({a.n_head} heads), micro batch {a.micro_batch} x {a.seq_len} tokens; "
          f"{a.steps} timed steps after {a.warmup_steps}, {a.repeat} run(s) each; losses identical: {same_loss}\n")
    print("| activation_checkpointing | peak RSS (MiB, max over ranks, median of runs) | model states rank 0 (MiB) "
          "| step time (ms, median) |")
    print("|---|---|---|---|")
    for r in rows:
        print(f"| {str(r['activation_checkpointing']).lower()} | {mib(r['peak_rss_bytes'])} "
              f"| {mib(r['model_state_bytes'])} | {r['step_time_s'] * 1e3:.0f} |")
    saved = stored["peak_rss_bytes"] - recomputed["peak_rss_bytes"]
    cost = recomputed["step_time_s"] / stored["step_time_s"] - 1
    est = stored["estimate_activations_16bit_bytes"]
    print(f"\npeak RSS saved: {mib(saved)} MiB ({saved / stored['peak_rss_bytes']:.0%}); step time {cost:+.0%}"
          + (f"; estimate-memory's no-recompute activation hint: {mib(est * (1 if a.mixed_precision == 'bf16' else 2))} MiB"
             if est else ""))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"config": vars(a), "rows": rows, "peak_rss_saved_bytes": saved, "step_time_cost": cost,
                       "losses_identical": same_loss}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
