#!/usr/bin/env python3
"""Benchmark: how large a GPT trains, in how much memory per rank, with how long a setup.

For every model size, world size and variant it runs the built-in trainer under `accel launch` for
--steps steps (micro batch 1 x --seq-len tokens, device cpu, no evaluation, checkpoint or export) and
reads from the run report of every rank (<output_dir>/report/rank_<r>.json):
  - the resident peak from process start to the end of setup (setup_peak_rss_bytes) and to the end
    of the last step (peak_rss_bytes), the largest over the ranks;
  - setup and training time (time_s), and the median step time (metrics.jsonl);
and, beside them, `accel estimate-memory --json` for the same job: the configured row's peak (the
step's fullest moment, device and host together: on a CPU run both are RAM), set against the
measured peak less the runtime's own resident set: the peak of the same launch with a one-layer
model of width 64 less that small model's own estimated peak (libtorch, the runtime, the data).

Variants: zero3 (deepspeed zero_stage 3, persistence threshold 0), full_shard (fsdp FULL_SHARD),
zero3_cpu (parameters and optimizer offloaded to host memory), zero3_nvme (both to files under
--nvme-dir). ds_zero3, ds_zero3_cpu and ds_zero3_nvme run DeepSpeed ZeRO-3 on its CPU accelerator
with the same model shape, the model built inside deepspeed.zero.Init with random in-scope init (no
init file: loading a whole one would defeat zero.Init); scripts/peers/scale_deepspeed.py says what
each sets and why. They fill the same row fields from each rank's VmHWM and timers, and have no
estimate (accel estimate-memory models accel's engine). --set deepspeed.<key> carries into their
DeepSpeed JSON where the key is the same DeepSpeed key; --ds-set sets DeepSpeed-only keys.
--before sets ACCEL_WHOLE_MODEL_INIT=1: every rank builds the whole model first, as the trainer did
before sharded initialization (docs/design/0023). Prints a markdown table and writes --json;
asserts nothing (tests do).

  scripts/python scripts/bench_scale.py --sizes 8x512,12x1024 --worlds 2,4 --variants zero3,full_shard
  scripts/python scripts/bench_scale.py --sizes 12x1536 --worlds 2 --variants zero3_nvme --before
  scripts/python scripts/bench_scale.py --sizes 12x1536 --worlds 2,4 --variants zero3_cpu,ds_zero3_cpu
  scripts/python scripts/bench_scale.py --sizes 32x2816 --worlds 4 --variants zero3_nvme \
      --set deepspeed.reduce_bucket_size=5e7 --set deepspeed.stage3_max_live_parameters=1e8
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(HERE, "peers"))
import scale_deepspeed  # noqa: E402

MIB = 1024 * 1024
ACCEL_VARIANTS = ("zero3", "full_shard", "zero3_cpu", "zero3_nvme")


def gpt_params(n_layer: int, n_embd: int, vocab: int, seq: int) -> int:
    # Blocks (attention and MLP weights and biases, two norms), tied embedding, positions, final norm.
    return n_layer * (12 * n_embd * n_embd + 13 * n_embd) + vocab * n_embd + seq * n_embd + 2 * n_embd


def backend_block(variant: str, nvme_dir: str) -> str:
    if variant == "full_shard":
        return "backend: fsdp\nfsdp: {sharding_strategy: FULL_SHARD}"
    offload = ""
    if variant == "zero3_cpu":
        offload = ", offload_optimizer_device: cpu, offload_param_device: cpu"
    elif variant == "zero3_nvme":
        offload = (f", offload_optimizer_device: nvme, offload_optimizer_nvme_path: {nvme_dir}/optimizer"
                   f", offload_param_device: nvme, offload_param_nvme_path: {nvme_dir}/params")
    return f"backend: deepspeed\ndeepspeed: {{zero_stage: 3, stage3_param_persistence_threshold: 0{offload}}}"


def write_job(a, d: str, variant: str, world: int, n_layer: int, n_embd: int) -> str:
    job = os.path.join(d, "job.yaml")
    heads = max(1, n_embd // 64)
    with open(job, "w") as f:
        f.write(f"""num_processes: {world}
device: cpu
{backend_block(variant, os.path.join(a.nvme_dir or d, "nvme"))}
model: {{name: gpt, n_layer: {n_layer}, n_head: {heads}, n_embd: {n_embd}, vocab_size: {a.vocab_size}, block_size: {a.seq_len}}}
data: {{kind: synthetic}}
optimizer: {{name: adamw, lr: 1.0e-4}}
training: {{max_steps: {a.steps}, micro_batch_size: 1, seq_len: {a.seq_len}, output_dir: {d}/run, resume: never,
  save_weights: false, log_every: 1, eval_every: 0, checkpoint_every: 0, checkpoint_at_end: false}}
""")
    return job


def set_args(a) -> list:
    """--set overrides for every launch and estimate (e.g. deepspeed.reduce_bucket_size=5e7)."""
    return [arg for kv in a.set for arg in ("--set", kv)]


def estimate(a, job: str) -> dict:
    path = job + ".estimate.json"
    p = subprocess.run([a.accel, "estimate-memory", job, "--json", path] + set_args(a), capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"accel estimate-memory failed:\n{p.stderr}")
    with open(path) as f:
        return next(r for r in json.load(f)["strategies"] if r["configured"])


def run_one(a, variant: str, world: int, n_layer: int, n_embd: int, before: bool) -> dict:
    with tempfile.TemporaryDirectory(prefix=f"bench_scale_{variant}_w{world}_", dir=a.tmp) as d:
        if variant in scale_deepspeed.VARIANTS:
            return scale_deepspeed.run_row(a, variant, world, n_layer, n_embd, d,
                                           gpt_params(n_layer, n_embd, a.vocab_size, a.seq_len))
        job = write_job(a, d, variant, world, n_layer, n_embd)
        est = estimate(a, job)
        env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
        if before:
            env["ACCEL_WHOLE_MODEL_INIT"] = "1"
        t0 = time.monotonic()
        p = subprocess.run([a.accel, "launch", job] + set_args(a), env=env, capture_output=True, text=True,
                           timeout=a.timeout)
        wall = time.monotonic() - t0
        row = {"variant": variant, "world": world, "n_layer": n_layer, "n_embd": n_embd, "before": before, "set": list(a.set),
               "params": gpt_params(n_layer, n_embd, a.vocab_size, a.seq_len), "wall_s": wall,
               "estimate_bytes": est["bytes"]["peak"], "estimate_phase": est["peak_phase"], "estimate": est["bytes"]}
        if p.returncode != 0:
            row["failed"] = p.stderr[-2000:]
            return row
        reports = []
        for r in range(world):
            with open(os.path.join(d, "run", "report", f"rank_{r}.json")) as f:
                reports.append(json.load(f))
        with open(os.path.join(d, "run", "metrics.jsonl")) as f:
            steps = [json.loads(line) for line in f if line.strip()]
    row.update({
        "setup_peak_rss_bytes": max(r["setup_peak_rss_bytes"] for r in reports),
        "peak_rss_bytes": max(r["peak_rss_bytes"] for r in reports),
        "setup_s": max(r["time_s"]["setup"] for r in reports),
        "training_s": max(r["time_s"]["training"] for r in reports),
        "step_time_s": statistics.median(s["step_time_s"] for s in steps),
        "final_loss": steps[-1]["loss"],
        # The engine's own account of its buffers (rank 0's report), beside the estimate's components.
        "engine_memory": reports[0].get("memory", {}),
    })
    return row


def print_table(rows: list) -> None:
    print("\n| variant | world | model | params | init | setup peak MiB | peak MiB | estimate MiB | (peak - runtime) / estimate | setup s | step s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        model = f"{r['n_layer']}x{r['n_embd']}"
        init = "zero.Init" if r["variant"] in scale_deepspeed.VARIANTS else "whole" if r["before"] else "sharded"
        est = f"{r['estimate_bytes'] / MIB:.0f}" if r["estimate_bytes"] else ""
        if "failed" in r:
            print(f"| {r['variant']} | {r['world']} | {model} | {r['params'] / 1e6:.0f}M | {init} | failed | | "
                  f"{est} | | | |")
            continue
        ratio = (f"{(r['peak_rss_bytes'] - r['runtime_rss_bytes']) / r['estimate_bytes']:.2f}"
                 if r["estimate_bytes"] else "")
        print(f"| {r['variant']} | {r['world']} | {model} | {r['params'] / 1e6:.0f}M | {init} | "
              f"{r['setup_peak_rss_bytes'] / MIB:.0f} | {r['peak_rss_bytes'] / MIB:.0f} | {est} | "
              f"{ratio} | {r['setup_s']:.1f} | {r['step_time_s']:.2f} |")


def reestimate(a, path: str) -> list:
    """The rows of an earlier --json with the estimate of the accel at hand (the measured figures
    kept): for working on the estimator without training again."""
    with open(path) as f:
        doc = json.load(f)
    saved = doc.get("args", {})
    for key in ("seq_len", "vocab_size", "steps", "set", "nvme_dir"):
        if key in saved:
            setattr(a, key, saved[key])
    rows = doc["rows"]
    with tempfile.TemporaryDirectory(prefix="bench_scale_reestimate_", dir=a.tmp) as d:
        base = {}
        default_set = a.set
        for r in rows:
            if r["variant"] not in ACCEL_VARIANTS:
                continue
            a.set = r.get("set", default_set)  # a row's own --set, where a file gathers several runs
            key = (r["variant"], r["world"], tuple(a.set))
            if key not in base:
                base[key] = estimate(a, write_job(a, d, r["variant"], r["world"], 1, 64))["bytes"]["peak"]
            est = estimate(a, write_job(a, d, r["variant"], r["world"], r["n_layer"], r["n_embd"]))
            r.update({"estimate_bytes": est["bytes"]["peak"], "estimate_phase": est["peak_phase"],
                      "estimate": est["bytes"], "base_estimate_bytes": base[key],
                      "runtime_rss_bytes": r["base_peak_rss_bytes"] - base[key]})
    return rows


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--accel", default=os.path.join(ROOT, "build", "accel"))
    p.add_argument("--sizes", default="8x512,12x1024", help="n_layer x n_embd, comma separated")
    p.add_argument("--worlds", default="2,4")
    p.add_argument("--variants", default="zero3,full_shard",
                   help="comma separated: " + ", ".join(ACCEL_VARIANTS + scale_deepspeed.VARIANTS))
    p.add_argument("--before", action="store_true", help="also run each case with the whole model built first")
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--vocab-size", type=int, default=32000)
    p.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS per rank")
    p.add_argument("--nvme-dir", default="", help="where zero3_nvme puts its files (default: the run's directory)")
    p.add_argument("--tmp", default=None, help="where run directories go (default: the system's)")
    p.add_argument("--timeout", type=int, default=3600)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="a job key for every run and estimate (repeatable), as accel launch --set")
    p.add_argument("--ds-set", action="append", default=[], metavar="KEY=VALUE",
                   help="a DeepSpeed key under zero_optimization for the ds_* rows only (repeatable, dotted for "
                        "nested blocks: offload_param.buffer_count=16)")
    p.add_argument("--json", default="")
    p.add_argument("--reestimate", default="", metavar="JSON",
                   help="run nothing: print the rows of an earlier --json with this accel's estimate")
    a = p.parse_args()
    if a.reestimate:
        rows = reestimate(a, a.reestimate)
        print_table(rows)
        if a.json:
            with open(a.json, "w") as f:
                json.dump({"command": " ".join(sys.argv), "rows": rows, "args": vars(a)}, f, indent=1)
        return 0
    try:
        sizes = [tuple(int(x) for x in s.split("x")) for s in a.sizes.split(",")]
        if any(len(s) != 2 for s in sizes):
            raise ValueError
    except ValueError:
        p.error(f"--sizes {a.sizes!r}: expected n_layer x n_embd pairs, comma separated, e.g. 8x512,12x1024")
    allowed = ACCEL_VARIANTS + scale_deepspeed.VARIANTS
    unknown = [v for v in a.variants.split(",") if v not in allowed]
    if unknown:
        p.error(f"--variants: unknown {', '.join(unknown)}; allowed: {', '.join(allowed)}")
    if a.before and any(v in scale_deepspeed.VARIANTS for v in a.variants.split(",")):
        p.error("--before builds accel's model whole first; DeepSpeed's rows have no such mode: "
                "run the ds_* variants without --before")
    try:
        scale_deepspeed.apply_ds_sets({}, a.ds_set)
    except ValueError as e:
        p.error(str(e))
    ds_ops = {v: scale_deepspeed.prepare_ops(v, dict(os.environ))
              for v in a.variants.split(",") if v in scale_deepspeed.VARIANTS}
    if a.ds_set and not ds_ops:
        print("bench_scale: warning: --ds-set has no effect: no ds_* variant in --variants", file=sys.stderr)
    ignored = scale_deepspeed.carried_sets(a.set)[1]
    if ds_ops and ignored:
        print(f"bench_scale: warning: --set {', '.join(ignored)} has no DeepSpeed counterpart; the ds_* rows "
              f"run without it", file=sys.stderr)
    rows = []
    for world in [int(w) for w in a.worlds.split(",")]:
        for variant in a.variants.split(","):
            base = run_one(a, variant, world, 1, 64, False)  # what a rank holds besides the model
            for n_layer, n_embd in sizes:
                for before in ([False, True] if a.before else [False]):
                    row = run_one(a, variant, world, n_layer, n_embd, before)
                    row["base_peak_rss_bytes"] = base.get("peak_rss_bytes", 0)
                    # The runtime's own: the base run's peak less its own model's estimated peak.
                    row["base_estimate_bytes"] = base.get("estimate_bytes", 0)
                    row["runtime_rss_bytes"] = base.get("peak_rss_bytes", 0) - base.get("estimate_bytes", 0)
                    rows.append(row)
                    print(json.dumps({k: v for k, v in row.items() if k != "estimate"}), flush=True)
    print_table(rows)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"command": " ".join(sys.argv), "rows": rows, "args": vars(a),
                       "deepspeed_ops": ds_ops}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
