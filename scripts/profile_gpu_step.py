#!/usr/bin/env python3
"""Where one training step of GPT-2 124M spends its GPU time: the eager PyTorch contender of
scripts/bench_gpu.py (the same model, batch, bf16 autocast, fused attention and AdamW; accel's
strategies run within 5% of it) under torch.profiler, a few steps after warm-up.

Prints and writes (JSON) the step's wall time, the GPU's busy time (the union of kernel
intervals, so idle gaps between kernels show as launch overhead), and kernel time by kind: matrix
multiplies, attention, normalization, the loss, the optimizer, casts and copies, other elementwise
work; then the kernels that take the most time. It asserts nothing.

  scripts/python scripts/profile_gpu_step.py --json profile.json
  scripts/python scripts/profile_gpu_step.py --dry-run     # no GPU: CPU operators of a tiny model
  scripts/python scripts/profile_gpu_step.py --accel build/accel --strategy accel-zero3   # accel's own
  scripts/python scripts/profile_gpu_step.py --trace DIR/rank0.pt.trace.json

--accel runs accel's built-in trainer on the same model and batch (bench_gpu.py's job for the
strategy) under `accel launch --profile`, --trace reads a rank's trace of such a run; either sums
it the same way (its kernels on a GPU, its top-level operators on a CPU) over the trace's
ProfilerStep spans, so accel's step and the eager one read side by side.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "reference"))

# Kernel kinds, matched in order against the lower-cased kernel (or operator) name.
KINDS = (
    ("attention", ("flash", "fmha", "attention", "sdpa", "efficient_attention")),
    ("matmul", ("gemm", "cutlass", "sm90_xmma", "sm80_xmma", "nvjet", "cublas", "matmul", "addmm", " mm", "::mm", "bmm")),
    ("optimizer", ("adam", "multi_tensor", "foreach", "clip", "norm_kernel", "fused_")),
    ("normalization", ("layer_norm", "layernorm", "rms_norm")),
    ("loss", ("cross_entropy", "log_softmax", "nll_loss", "softmax")),
    ("cast_copy", ("copy", "cast", "to_copy", "direct_copy", "bfloat16", "memcpy", "memset", "fill")),
    ("elementwise", ("elementwise", "vectorized", "unrolled", "gelu", "tanh", "add", "mul", "reduce")),
)


def kind_of(name: str) -> str:
    low = name.lower()
    for kind, keys in KINDS:
        if any(k in low for k in keys):
            return kind
    return "other"


def busy_time_us(intervals):
    """Length of the union of [start, end) intervals."""
    total, end = 0.0, None
    for s, e in sorted(intervals):
        if end is None or s > end:
            total += e - s
            end = e
        elif e > end:
            total += e - end
            end = e
    return total


def profile_eager(a):
    """The eager contender's steps under torch.profiler: (events as (name, start_us, end_us), step
    wall seconds, device name, torch version)."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    import bench_gpu  # the benchmark's model setup: the same attention as its contenders
    import gpt_model

    bench_gpu.use_fused_attention(gpt_model)
    cuda = not a.dry_run
    dev = torch.device("cuda", 0) if cuda else torch.device("cpu")
    model = gpt_model.build_model(a.n_layer, a.n_head, a.n_embd, a.vocab, a.seq, seed=1337).to(dev)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=6e-4, betas=(0.9, 0.95), eps=1e-8)
    g = torch.Generator(device="cpu").manual_seed(1)

    def step():
        x = torch.randint(0, a.vocab, (a.micro, a.seq), generator=g).to(dev, non_blocking=True)
        y = torch.randint(0, a.vocab, (a.micro, a.seq), generator=g).to(dev, non_blocking=True)
        with torch.autocast(dev.type, dtype=torch.bfloat16):
            _, loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    def sync():
        if cuda:
            torch.cuda.synchronize()

    for _ in range(a.warmup):
        step()
    sync()
    activities = [ProfilerActivity.CUDA] if cuda else [ProfilerActivity.CPU]
    with profile(activities=activities) as prof:
        t0 = time.perf_counter()
        for _ in range(a.steps):
            step()
        sync()
        wall_s = (time.perf_counter() - t0) / a.steps

    events = [e for e in prof.events() if (e.device_type.name == "CUDA") == cuda and e.time_range.end > e.time_range.start]
    if not cuda:  # CPU: top-level operators only, so time is not counted twice
        events = [e for e in events if e.cpu_parent is None]
    return ([(e.name, e.time_range.start, e.time_range.end) for e in events], wall_s,
            torch.cuda.get_device_name(0) if cuda else "cpu", torch.__version__)


def trace_events(path):
    """A Chrome trace of `accel launch --profile`: (events, steps, step wall seconds, device). Kernels
    and device copies when the trace has them (a GPU rank), else the CPU operators no other operator
    of the same thread encloses; only those inside the ProfilerStep spans."""
    with open(path) as f:
        doc = json.load(f)
    events = [e for e in doc["traceEvents"] if e.get("ph") == "X" and "dur" in e]
    spans = [e for e in events if e.get("name", "").startswith("ProfilerStep#")]
    if not spans:
        raise SystemExit(f"profile_gpu_step: {path} has no ProfilerStep spans (not from accel launch --profile?)")
    lo, hi = min(e["ts"] for e in spans), max(e["ts"] + e["dur"] for e in spans)
    device = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    if device:  # started inside the window; the last ones may finish after its last span ends
        chosen = [e for e in device if e["ts"] >= lo]
    else:
        ops = sorted((e for e in events if e.get("cat") == "cpu_op" and lo <= e["ts"] <= hi),
                     key=lambda e: (e["tid"], e["ts"], -e["dur"]))
        chosen, open_end = [], {}
        for e in ops:  # sorted by start: an op inside the last kept one of its thread is nested
            if e["ts"] >= open_end.get(e["tid"], -1.0):
                chosen.append(e)
                open_end[e["tid"]] = e["ts"] + e["dur"]
    props = doc.get("deviceProperties") or []
    name = props[0].get("name", "cuda") if device and props else ("cuda" if device else "cpu")
    wall_s = sum(e["dur"] for e in spans) / len(spans) / 1e6
    return [(e["name"], e["ts"], e["ts"] + e["dur"]) for e in chosen], len(spans), wall_s, name


def profile_accel(a, workdir):
    """accel's trainer on bench_gpu.py's job for a.strategy, its steps after a.warmup recorded by
    `accel launch --profile`: the path of rank 0's trace."""
    import bench_gpu
    a.steps += a.warmup  # the job runs the warm-up and the profiled steps
    job, _ = bench_gpu.write_accel_job(a.strategy, a, workdir)
    traces = os.path.join(workdir, "traces")
    window = f"{a.warmup + 1}:{a.steps}"
    p = subprocess.run([a.accel, "launch", job, "--profile", traces, "--profile-steps", window],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    if p.returncode != 0:
        raise SystemExit(f"profile_gpu_step: accel launch exited {p.returncode}\n{p.stdout[-3000:]}")
    return os.path.join(traces, "rank0.pt.trace.json")


def summarize(events, steps, wall_s, top):
    """Kernel time by kind and by name, per step, and the device's busy fraction."""
    by_kind, by_name = {}, {}
    for name, start, end in events:
        dur = end - start
        by_kind[kind_of(name)] = by_kind.get(kind_of(name), 0.0) + dur
        n = by_name.setdefault(name, [0.0, 0])
        n[0] += dur
        n[1] += 1
    busy_us = busy_time_us([(s, e) for _, s, e in events]) / steps
    step_us = wall_s * 1e6
    return {
        "profiled_steps": steps,
        "step_ms": step_us / 1e3,
        "busy_ms_per_step": busy_us / 1e3,
        "busy_fraction": busy_us / step_us if step_us else 0.0,
        "kernels_per_step": len(events) / steps,
        "ms_per_step_by_kind": {k: v / steps / 1e3 for k, v in sorted(by_kind.items(), key=lambda kv: -kv[1])},
        "top": [{"name": n[:160], "ms_per_step": t / steps / 1e3, "calls_per_step": c / steps,
                 "kind": kind_of(n)} for n, (t, c) in sorted(by_name.items(), key=lambda kv: -kv[1][0])[:top]],
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n-layer", type=int, default=12)
    ap.add_argument("--n-head", type=int, default=12)
    ap.add_argument("--n-embd", type=int, default=768)
    ap.add_argument("--vocab", type=int, default=50304)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--micro", type=int, default=16)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--steps", type=int, default=3, help="profiled steps")
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--json")
    ap.add_argument("--dry-run", action="store_true", help="CPU, a tiny model")
    ap.add_argument("--trace", help="sum this rank trace of `accel launch --profile` instead of profiling eager")
    ap.add_argument("--accel", help="profile accel's trainer (this accel binary) instead of eager")
    ap.add_argument("--strategy", default="accel-zero3", help="with --accel: a bench_gpu.py accel contender")
    a = ap.parse_args()
    if a.dry_run:
        a.n_layer, a.n_head, a.n_embd, a.vocab, a.seq, a.micro, a.warmup, a.steps = 2, 2, 64, 256, 32, 2, 1, 2

    if a.trace or a.accel:
        with tempfile.TemporaryDirectory(prefix="accel_profile_step_") as workdir:
            trace = a.trace or profile_accel(a, workdir)
            events, steps, wall_s, device = trace_events(trace)
        result = {"trace": a.trace or f"accel launch --profile ({a.strategy})", "device": device,
                  **summarize(events, steps, wall_s, a.top)}
        if a.accel:
            result["model"] = {"n_layer": a.n_layer, "n_head": a.n_head, "n_embd": a.n_embd, "vocab": a.vocab,
                               "seq": a.seq, "micro": a.micro}
        print(f"{device}: {result['trace']}, {steps} profiled steps")
    else:
        events, wall_s, device, version = profile_eager(a)
        result = {"model": {"n_layer": a.n_layer, "n_head": a.n_head, "n_embd": a.n_embd, "vocab": a.vocab,
                            "seq": a.seq, "micro": a.micro},
                  "device": device, "torch": version, **summarize(events, a.steps, wall_s, a.top)}
        print(f"{device}, torch {version}: GPT-2 L{a.n_layer} C{a.n_embd} T{a.seq} micro {a.micro}, "
              f"{a.steps} profiled steps")
    total_us = sum(result["ms_per_step_by_kind"].values()) * 1e3
    print(f"step {result['step_ms']:.1f} ms, device busy {result['busy_ms_per_step']:.1f} ms "
          f"({100 * result['busy_fraction']:.0f}%), {result['kernels_per_step']:.0f} kernels a step")
    print("| kind | ms a step | share of kernel time |\n|---|---|---|")
    for k, ms in result["ms_per_step_by_kind"].items():
        print(f"| {k} | {ms:.2f} | {100 * ms * 1e3 / total_us:.1f}% |")
    print("| kernel | kind | ms a step | calls a step |\n|---|---|---|---|")
    for t in result["top"]:
        print(f"| {t['name'][:90]} | {t['kind']} | {t['ms_per_step']:.2f} | {t['calls_per_step']:.0f} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
