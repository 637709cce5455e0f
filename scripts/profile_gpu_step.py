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
"""
from __future__ import annotations

import argparse
import json
import os
import sys
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
    a = ap.parse_args()
    if a.dry_run:
        a.n_layer, a.n_head, a.n_embd, a.vocab, a.seq, a.micro, a.warmup, a.steps = 2, 2, 64, 256, 32, 2, 1, 2

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
    by_kind, by_name, intervals = {}, {}, []
    for e in events:
        dur = e.time_range.end - e.time_range.start
        by_kind[kind_of(e.name)] = by_kind.get(kind_of(e.name), 0.0) + dur
        n = by_name.setdefault(e.name, [0.0, 0])
        n[0] += dur
        n[1] += 1
        intervals.append((e.time_range.start, e.time_range.end))
    total_us = sum(by_kind.values())
    busy_us = busy_time_us(intervals) / a.steps
    step_us = wall_s * 1e6
    result = {
        "model": {"n_layer": a.n_layer, "n_head": a.n_head, "n_embd": a.n_embd, "vocab": a.vocab, "seq": a.seq,
                  "micro": a.micro},
        "device": torch.cuda.get_device_name(0) if cuda else "cpu",
        "torch": torch.__version__,
        "profiled_steps": a.steps,
        "step_ms": step_us / 1e3,
        "busy_ms_per_step": busy_us / 1e3,
        "busy_fraction": busy_us / step_us if step_us else 0.0,
        "kernels_per_step": len(events) / a.steps,
        "ms_per_step_by_kind": {k: v / a.steps / 1e3 for k, v in sorted(by_kind.items(), key=lambda kv: -kv[1])},
        "top": [{"name": n[:160], "ms_per_step": t / a.steps / 1e3, "calls_per_step": c / a.steps,
                 "kind": kind_of(n)} for n, (t, c) in sorted(by_name.items(), key=lambda kv: -kv[1][0])[:a.top]],
    }
    print(f"{result['device']}, torch {result['torch']}: GPT-2 L{a.n_layer} C{a.n_embd} T{a.seq} micro {a.micro}, "
          f"{a.steps} profiled steps")
    print(f"step {result['step_ms']:.1f} ms, device busy {result['busy_ms_per_step']:.1f} ms "
          f"({100 * result['busy_fraction']:.0f}%), {result['kernels_per_step']:.0f} kernels a step")
    print("| kind | ms a step | share of kernel time |\n|---|---|---|")
    for k, ms in result["ms_per_step_by_kind"].items():
        print(f"| {k} | {ms:.2f} | {100 * ms * 1e3 * a.steps / total_us:.1f}% |")
    print("| kernel | kind | ms a step | calls a step |\n|---|---|---|---|")
    for t in result["top"]:
        print(f"| {t['name'][:90]} | {t['kind']} | {t['ms_per_step']:.2f} | {t['calls_per_step']:.0f} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
