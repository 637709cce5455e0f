#!/usr/bin/env python3
"""`accel estimate-memory`'s step peak against a GPU's measured peak, job by job.

Each case is a short accel training run on the GPU (world 1, or world 2 as two processes sharing it
through host-staged Gloo); its measured peak is rank 0's peak_mem_bytes in metrics.jsonl, the
caching allocator's peak allocated bytes (torch.cuda.max_memory_allocated), and beside it the
estimate's configured row for the same job file. Cases run a few at a time: each process has its
own allocator and peak, so runs sharing the GPU do not change each other's figures.

  scripts/python scripts/bench_gpu_memory.py --json gpu_memory.json
  scripts/python scripts/bench_gpu_memory.py --dry-run   # no GPU: the same jobs, tiny, on the CPU
  scripts/python scripts/bench_gpu_memory.py --reestimate docs/bench/gpu_memory_h200.json  # no GPU

It prints a table and writes JSON (figures in bytes); it asserts nothing.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(HERE, "peers"))
import accel_runner  # noqa: E402  (its to_yaml writes accel's job files)
from bench_gpu import estimate_step_peak  # noqa: E402

# name -> (model n_layer x n_embd, micro batch, world, job keys over the base job). The default run
# (DEFAULT_CASES) takes about 95 s three at a time on an H200; the others are opt-in (--only): the
# 1.3B models' setup and the world-2 runs through host-staged Gloo take minutes.
ZERO3 = {"backend": "deepspeed", "deepspeed": {"zero_stage": 3, "stage3_param_persistence_threshold": 0}}
ZERO3_OFFLOAD = {"backend": "deepspeed", "deepspeed": {**ZERO3["deepspeed"], "offload_optimizer_device": "cpu"}}
ZERO3_OFFLOAD_PARAMS = {"backend": "deepspeed", "deepspeed": {**ZERO3_OFFLOAD["deepspeed"], "offload_param_device": "cpu"}}
CASES = {
    "1.3B ddp": ("24x2048", 4, 1, {"backend": "ddp"}),
    # ddp's variants: which part of its step the peak grows with (micro batch, clipping, the AdamW kernel).
    "1.3B ddp micro 1": ("24x2048", 1, 1, {"backend": "ddp"}),
    "1.3B ddp no clipping": ("24x2048", 4, 1, {"backend": "ddp", "training": {"max_grad_norm": 0}}),
    "1.3B ddp unfused adamw": ("24x2048", 4, 1, {"backend": "ddp", "optimizer": {"fused": False}}),
    "1.3B zero1": ("24x2048", 4, 1, {"backend": "deepspeed", "deepspeed": {"zero_stage": 1}}),
    "1.3B zero2": ("24x2048", 4, 1, {"backend": "deepspeed", "deepspeed": {"zero_stage": 2}}),
    "1.3B zero3": ("24x2048", 4, 1, ZERO3),
    "1.3B zero3 bucket 5e7": ("24x2048", 4, 1, {"backend": "deepspeed", "deepspeed": {
        "zero_stage": 3, "stage3_param_persistence_threshold": 0, "reduce_bucket_size": 5e7,
        "stage3_max_live_parameters": 1e8}}),
    "1.3B full_shard": ("24x2048", 4, 1, {"backend": "fsdp", "fsdp": {"sharding_strategy": "FULL_SHARD"}}),
    "1.3B zero3 offload cpu": ("24x2048", 4, 1, ZERO3_OFFLOAD),
    "1.3B zero3 offload cpu+param": ("24x2048", 4, 1, ZERO3_OFFLOAD_PARAMS),
    "389M ddp": ("12x1536", 8, 1, {"backend": "ddp"}),
    "389M zero2": ("12x1536", 8, 1, {"backend": "deepspeed", "deepspeed": {"zero_stage": 2}}),
    "389M zero3": ("12x1536", 8, 1, ZERO3),
    "389M full_shard": ("12x1536", 8, 1, {"backend": "fsdp", "fsdp": {"sharding_strategy": "FULL_SHARD"}}),
    "389M zero3 offload cpu": ("12x1536", 8, 1, ZERO3_OFFLOAD),
    # The chunked loss (training.loss_chunk_tokens): one chunk's logits and one tied gradient copy.
    "389M zero3 chunked loss": ("12x1536", 8, 1, {**ZERO3, "training": {"loss_chunk_tokens": 1024}}),
    "389M zero3 offload cpu+param": ("12x1536", 8, 1, ZERO3_OFFLOAD_PARAMS),
    "389M full_shard offload_params w2": ("12x1536", 8, 2, {"backend": "fsdp", "fsdp": {
        "sharding_strategy": "FULL_SHARD", "offload_params": True}}),
    "389M zero3 w2": ("12x1536", 8, 2, ZERO3),
    "389M full_shard fp32 w2": ("12x1536", 4, 2, {"backend": "fsdp", "mixed_precision": "no",
                                                  "fsdp": {"sharding_strategy": "FULL_SHARD"}}),
}


DEFAULT_CASES = ("389M ddp", "389M zero2", "389M zero3", "389M full_shard", "389M zero3 offload cpu",
                 "389M zero3 chunked loss")


def job_for(name, a, workdir):
    shape, micro, world, keys = CASES[name]
    n_layer, n_embd = (int(x) for x in shape.split("x"))
    seq, vocab = (64, 256) if a.dry_run else (1024, 50304)
    if a.dry_run:
        n_layer, n_embd, micro = 2, 64, 2
    out = os.path.join(workdir, name.replace(" ", "_"))
    job = {"device": "cpu" if a.dry_run else "cuda", "num_processes": world, "main_process_port": 0,
           "mixed_precision": "bf16", "collective_timeout_s": 300,
           "model": {"name": "gpt", "n_layer": n_layer, "n_head": max(1, n_embd // 128), "n_embd": n_embd,
                     "vocab_size": vocab, "block_size": seq},
           "data": {"kind": "synthetic"},
           "training": {"max_steps": a.steps, "micro_batch_size": micro, "gradient_accumulation_steps": 1,
                        "seq_len": seq, "output_dir": out, "eval_every": 0, "checkpoint_every": 0,
                        "log_every": 1, "resume": "never", "save_weights": False}}
    if world > 1 and not a.dry_run:
        job["cuda_collectives"] = "gloo"  # two processes on one GPU: NCCL refuses a shared device
    for k, v in keys.items():
        job[k] = {**job[k], **v} if isinstance(v, dict) and isinstance(job.get(k), dict) else v
    path = out + ".yaml"
    with open(path, "w") as f:
        f.write(accel_runner.to_yaml(job) + "\n")
    return path, out


def with_estimate(row, est, measured):
    """A case's row: the estimate's figures beside the measured peak."""
    b = est["bytes"]
    row.update({"parameters": est["parameters"], "world": est["world"], "row": est["row"],
                "measured_peak": measured, "estimate_peak": b["peak"], "estimate_states": b["peak"] - b["transients"],
                "estimate_transients": b["transients"], "peak_phase": est["peak_phase"],
                "ratio": measured / b["peak"] if b["peak"] else None})
    return row


def run_case(name, a, workdir):
    path, out = job_for(name, a, workdir)
    est = estimate_step_peak(a, path, workdir, os.path.basename(out))
    if "error" in est:
        return {"case": name, "error": "estimate-memory: " + est["error"]}
    try:
        p = subprocess.run([a.accel, "launch", path], capture_output=True, text=True, timeout=a.timeout)
    except subprocess.TimeoutExpired:
        return {"case": name, "error": f"over {a.timeout} s"}
    if p.returncode != 0:
        return {"case": name, "error": f"exit {p.returncode}: " + (p.stdout + p.stderr)[-1500:]}
    with open(os.path.join(out, "metrics.jsonl")) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    measured = max(r["peak_mem_bytes"] for r in rows)
    return with_estimate({"case": name, "step_time_s": rows[-1].get("step_time_s")}, est, measured)


def reestimate(a, path):
    """An earlier run's cases with their estimates recomputed (the estimate is a function of the job
    file alone): an estimator change is compared against the measured peaks without a GPU."""
    with open(path) as f:
        doc = json.load(f)
    a.dry_run, a.steps = doc["dry_run"], doc["steps"]
    with tempfile.TemporaryDirectory(prefix="accel_bench_gpu_memory_reestimate_") as workdir:
        for i, r in enumerate(doc["results"]):
            if "error" in r:
                continue
            job, out = job_for(r["case"], a, workdir)
            est = estimate_step_peak(a, job, workdir, os.path.basename(out))
            if "error" in est:
                print(f"{r['case']}: estimate-memory: {est['error']}", file=sys.stderr)
                return 1
            doc["results"][i] = with_estimate(r, est, r["measured_peak"])
    return doc


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--accel", default=os.path.join(ROOT, "build", "accel"))
    ap.add_argument("--only", default="", help="comma-separated case names (default: DEFAULT_CASES)")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--parallel", type=int, default=3, help="cases at once")
    ap.add_argument("--timeout", type=float, default=240.0, help="seconds each run may take")
    ap.add_argument("--json", default="")
    ap.add_argument("--dry-run", action="store_true", help="the same jobs, tiny, on the CPU (checks the script)")
    ap.add_argument("--reestimate", default="", metavar="JSON",
                    help="recompute the estimates of an earlier run's JSON against its measured peaks (no GPU); "
                         "rewrites --json if given")
    a = ap.parse_args()
    gib = 2.0 ** 30
    if a.reestimate:
        doc = reestimate(a, a.reestimate)
        if not isinstance(doc, dict):
            return doc
        for r in doc["results"]:
            if "error" not in r:
                print(f"{r['case']}: measured {r['measured_peak'] / gib:.2f} GiB, estimate {r['estimate_peak'] / gib:.2f} GiB, "
                      f"ratio {r['ratio']:.3f} ({r['peak_phase']})")
        if a.json:
            with open(a.json, "w") as f:
                json.dump(doc, f, indent=1)
        return 0
    if a.only and any(n not in CASES for n in a.only.split(",")):
        print(f"bench_gpu_memory: unknown case in --only; the cases: {', '.join(CASES)}", file=sys.stderr)
        return 2
    names = a.only.split(",") if a.only else list(DEFAULT_CASES)
    print("| case | parameters | world | measured peak (GiB) | estimate (GiB) | measured / estimate | estimate's phase |")
    print("|---|---|---|---|---|---|---|", flush=True)
    results = []
    # Each case's line and the JSON so far as soon as it finishes: a run cut short keeps what it had.
    with tempfile.TemporaryDirectory(prefix="accel_bench_gpu_memory_") as workdir:
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, a.parallel)) as pool:
            for done in concurrent.futures.as_completed([pool.submit(run_case, n, a, workdir) for n in names]):
                r = done.result()
                results.append(r)
                if "error" in r:
                    print(f"| {r['case']} | error: {r['error'][-300:]} |", flush=True)
                else:
                    print(f"| {r['case']} | {r['parameters'] / 1e6:.0f}M | {r['world']} | {r['measured_peak'] / gib:.2f} | "
                          f"{r['estimate_peak'] / gib:.2f} | {r['ratio']:.3f} | {r['peak_phase']} |", flush=True)
                if a.json:
                    with open(a.json, "w") as f:
                        json.dump({"dry_run": a.dry_run, "steps": a.steps, "results": results}, f, indent=1)
    return 0 if all("error" not in r for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
