#!/usr/bin/env python3
"""Benchmark: accel's ddp backend next to PyTorch DDP (Gloo, CPU) on the same GPT and batch shape.

Runs `accel launch` with the quickstart model shape (or the flags given) for --warmup-steps + --steps
steps, reads tokens/s over the timed steps from its metrics.jsonl (sum of tokens / sum of step
times), then runs scripts/reference/torch_ddp_bench.py with the same shape, and prints both with
their ratio. Writes a JSON with both results when --json is given. The ratio is only meaningful on
an otherwise idle machine; run it a few times (--repeat) and read the median.

  scripts/python scripts/bench_ddp_vs_torch.py --world 2 --steps 40 --repeat 3 --json /tmp/ddp_vs_torch.json
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


def run_accel(a, out_dir: str) -> dict:
    job = os.path.join(out_dir, "job.yaml")
    with open(job, "w") as f:
        f.write(f"""backend: ddp
num_processes: {a.world}
device: cpu
main_process_port: 0
model: {{name: gpt, n_layer: {a.n_layer}, n_head: {a.n_head}, n_embd: {a.n_embd}, vocab_size: {a.vocab_size}, block_size: {a.seq_len}}}
data: {{kind: synthetic}}
optimizer: {{name: adamw, lr: 1.0e-3}}
ddp: {{bucket_cap_mb: {a.bucket_cap_mb}}}
training: {{max_steps: {a.warmup_steps + a.steps}, micro_batch_size: {a.micro_batch}, gradient_accumulation_steps: {a.accum},
  seq_len: {a.seq_len}, output_dir: {out_dir}/run, resume: never, save_weights: false, log_every: 1000}}
""")
    env = dict(os.environ)
    if a.threads:
        env["OMP_NUM_THREADS"] = str(a.threads)
    subprocess.run([a.accel, "launch", job], check=True, env=env, stdout=subprocess.DEVNULL)
    with open(os.path.join(out_dir, "run", "metrics.jsonl")) as f:
        records = [json.loads(line) for line in f if line.strip()]
    timed = [r for r in records if r["step"] >= a.warmup_steps]
    tokens = sum(r["tokens"] for r in timed)
    seconds = sum(r["step_time_s"] for r in timed)
    return {"tokens_per_s": tokens / seconds, "step_time_s": seconds / len(timed),
            "step_time_s_median": statistics.median(r["step_time_s"] for r in timed),
            "peak_mem_bytes": max(r["peak_mem_bytes"] for r in timed)}


def run_torch(a, out_dir: str) -> dict:
    path = os.path.join(out_dir, "torch.json")
    cmd = [sys.executable, os.path.join(HERE, "reference", "torch_ddp_bench.py"), "--world", str(a.world),
           "--n-layer", str(a.n_layer), "--n-head", str(a.n_head), "--n-embd", str(a.n_embd),
           "--vocab-size", str(a.vocab_size), "--block-size", str(a.seq_len), "--seq-len", str(a.seq_len),
           "--micro-batch", str(a.micro_batch), "--accum", str(a.accum), "--steps", str(a.steps),
           "--warmup-steps", str(a.warmup_steps), "--bucket-cap-mb", str(a.bucket_cap_mb), "--json", path]
    if a.threads:
        cmd += ["--threads", str(a.threads)]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    with open(path) as f:
        return json.load(f)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--accel", default=os.environ.get("ACCEL_BINARY", os.path.join(ROOT, "build", "accel")))
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--threads", type=int, default=None, help="threads per rank (default: cores / world)")
    p.add_argument("--n-layer", dest="n_layer", type=int, default=2)
    p.add_argument("--n-head", dest="n_head", type=int, default=4)
    p.add_argument("--n-embd", dest="n_embd", type=int, default=128)
    p.add_argument("--vocab-size", dest="vocab_size", type=int, default=256)
    p.add_argument("--seq-len", dest="seq_len", type=int, default=64)
    p.add_argument("--micro-batch", dest="micro_batch", type=int, default=8)
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--warmup-steps", dest="warmup_steps", type=int, default=5)
    p.add_argument("--bucket-cap-mb", dest="bucket_cap_mb", type=float, default=25.0)
    p.add_argument("--repeat", type=int, default=1, help="alternate the two this many times; report medians")
    p.add_argument("--json")
    a = p.parse_args()

    accel_runs, torch_runs = [], []
    with tempfile.TemporaryDirectory(prefix="accel-bench-ddp-") as tmp:
        for i in range(a.repeat):
            d = os.path.join(tmp, str(i))
            os.makedirs(d)
            accel_runs.append(run_accel(a, d))
            torch_runs.append(run_torch(a, d))
    acc = statistics.median(r["tokens_per_s"] for r in accel_runs)
    tor = statistics.median(r["tokens_per_s"] for r in torch_runs)
    shape = (f"gpt {a.n_layer}x{a.n_embd} ({a.n_head} heads), world {a.world}, micro {a.micro_batch} x accum {a.accum}"
             f" x seq {a.seq_len}, {a.steps} timed steps after {a.warmup_steps}, median of {a.repeat}")
    print(f"| {shape} | tokens/s | ms/step |")
    print("|---|---:|---:|")
    print(f"| accel ddp | {acc:,.0f} | {statistics.median(r['step_time_s'] for r in accel_runs) * 1e3:.1f} |")
    print(f"| torch DDP (Gloo) | {tor:,.0f} | {statistics.median(r['step_time_s'] for r in torch_runs) * 1e3:.1f} |")
    print(f"accel / torch = {acc / tor:.2f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"shape": shape, "accel": accel_runs, "torch": torch_runs, "ratio": acc / tor}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
