#!/usr/bin/env python3
"""The loss over the vocabulary, plain against chunked (training.loss_chunk_tokens, issue 51 item 3):
peak memory and tokens/s of the built-in trainer's step with each, on the CPU or one GPU.

Each case is one `accel launch` of the built-in GPT at world 1 (ddp, synthetic data, AdamW), the same
job but for training.loss_chunk_tokens (0: the plain path, [tokens, vocab] fp32 logits and log-softmax,
and three [V, C] gradients of the tied table; N: chunks of N tokens, the tied table's lookup with a
sparse gradient). SGD without weight decay, which updates in place, so that no optimizer temporaries set
the peak. Figures from metrics.jsonl: peak_mem_bytes (the resident peak on the CPU, the caching
allocator's peak allocated bytes on a GPU; the largest over the steps) and the median step time after
--warmup steps; on the CPU also the step's transient, that peak over the resident size after the run
(report/rank_0.json: parameters, gradients and momentum held). Everything else in the job is equal, so
the difference is the head and loss step's; `analysis` in the JSON counts the [tokens, V] and [V, C]
tensors each path holds at once.

  scripts/python scripts/bench_chunked_loss.py --json docs/bench/chunked_loss_cpu_2core_loaded.json
  scripts/python scripts/bench_chunked_loss.py --gpu --json out.json   # GPT-2 124M, bf16, 16 x 1024 tokens
  scripts/python scripts/bench_chunked_loss.py --dry-run               # a tiny model: checks the script
It asserts nothing.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(HERE, "peers"))
import accel_runner  # noqa: E402
from bench_gpu import run_bounded  # noqa: E402

# Shapes: the CPU default is where the [V, C] transients were first seen (C = 1536) with GPT-2's vocabulary
# and one block, so the head dominates; --gpu is issue 51's GPT-2 124M step.
CPU = dict(n_layer=1, n_head=12, n_embd=1536, vocab=50257, seq=256, micro=2, steps=4, warmup=1,
           chunks="0,128", precisions="no,bf16")
GPU = dict(n_layer=12, n_head=12, n_embd=768, vocab=50257, seq=1024, micro=16, steps=12, warmup=4,
           chunks="0,4096,1024", precisions="bf16")
DRY = dict(n_layer=1, n_head=2, n_embd=64, vocab=300, seq=32, micro=2, steps=3, warmup=1, chunks="0,16",
           precisions="no,bf16")


def job_for(a, precision, chunk, out):
    return {"device": "cuda" if a.gpu else "cpu", "num_processes": 1, "main_process_port": 0,
            "mixed_precision": precision, "backend": "ddp",
            "model": {"name": "gpt", "n_layer": a.n_layer, "n_head": a.n_head, "n_embd": a.n_embd,
                      "vocab_size": a.vocab, "block_size": a.seq},
            "data": {"kind": "synthetic"},
            # SGD without weight decay updates in place: no optimizer temporaries (the CPU's elementwise
            # AdamW makes [V, C] ones for the table) to set the peak instead of the head and loss.
            "optimizer": {"name": "sgd", "lr": 1e-2, "momentum": 0.9, "weight_decay": 0.0},
            "scheduler": {"name": "constant", "warmup_steps": 0},
            "training": {"max_steps": a.steps, "micro_batch_size": a.micro, "seq_len": a.seq, "output_dir": out,
                         "eval_every": 0, "checkpoint_every": 0, "checkpoint_at_end": False, "log_every": 1,
                         "resume": "never", "save_weights": False, "loss_chunk_tokens": chunk}}


def run_case(a, precision, chunk, workdir):
    name = f"{precision}_chunk{chunk}"
    out = os.path.join(workdir, name)
    path = os.path.join(workdir, name + ".yaml")
    with open(path, "w") as f:
        f.write(accel_runner.to_yaml(job_for(a, precision, chunk, out)) + "\n")
    p = run_bounded([a.accel, "launch", path], a.timeout, merge_stderr=True)
    if p.returncode != 0:
        return {"precision": precision, "loss_chunk_tokens": chunk, "error": f"exit {p.returncode}: {p.stdout[-1500:]}"}
    with open(os.path.join(out, "metrics.jsonl")) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    step = statistics.median(r["step_time_s"] for r in rows[a.warmup:])
    r = {"precision": precision, "loss_chunk_tokens": chunk, "peak_mib": max(x["peak_mem_bytes"] for x in rows) / 2 ** 20,
         "step_s": step, "tokens_per_s": a.micro * a.seq / step, "losses": [x["loss"] for x in rows]}
    if not a.gpu:  # the step's transients: its resident peak over the resident size after the run
        with open(os.path.join(out, "report", "rank_0.json")) as f:
            report = json.load(f)
        r["steady_mib"] = report["rss_bytes_at_end"] / 2 ** 20
        r["step_transient_mib"] = r["peak_mib"] - r["steady_mib"]
    return r


def analysis(a, chunk, precision):
    """MiB of the [tokens, V] and [V, C] tensors each path holds at once at its fullest (an analysis of
    the ops, beside the measured peaks)."""
    n, v, c = a.micro * a.seq, a.vocab, a.n_embd
    w = 2 if precision == "bf16" else 4  # the head's compute dtype
    mib = 2 ** -20
    if chunk == 0:  # in backward: the saved fp32 log-softmax, the nll gradient and the log-softmax one
        return {"tokens_x_vocab_mib": n * v * 12 * mib, "vocab_x_c_mib": 3 * v * c * w * mib}
    k = min(chunk, n)  # a chunk's fp32 logits, and under bf16 its bf16 logits or gradient beside them
    return {"tokens_x_vocab_mib": k * v * (4 + (w if w < 4 else 0)) * mib, "vocab_x_c_mib": v * c * w * mib}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpu", action="store_true", help="GPT-2 124M, bf16, 16 x 1024 tokens on cuda:0")
    ap.add_argument("--dry-run", action="store_true", help="a tiny model on the CPU (the GPU check's rehearsal)")
    for k, v in CPU.items():
        ap.add_argument("--" + k.replace("_", "-"), type=type(v), default=None)
    ap.add_argument("--timeout", type=float, default=0.0, help="seconds each case may take (0: no limit)")
    ap.add_argument("--accel", default=os.path.join(ROOT, "build", "accel"))
    ap.add_argument("--json", default="")
    ap.add_argument("--where", default="", help="what machine this ran on, for the JSON")
    a = ap.parse_args()
    preset = DRY if a.dry_run else GPU if a.gpu else CPU
    for k, v in preset.items():
        if getattr(a, k) is None:
            setattr(a, k, v)
    if a.gpu:
        import torch
        if not torch.cuda.is_available():
            print("bench_chunked_loss: no CUDA GPU visible", file=sys.stderr)
            return 77
        where = torch.cuda.get_device_name(0)
    else:
        where = f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores"
    cases = []
    with tempfile.TemporaryDirectory(prefix="accel_bench_chunked_loss_") as workdir:
        for precision in a.precisions.split(","):
            for chunk in (int(c) for c in a.chunks.split(",")):
                r = run_case(a, precision, chunk, workdir)
                r["analysis"] = analysis(a, chunk, precision)
                cases.append(r)
                print(f"{precision} loss_chunk_tokens {chunk}: " + (r.get("error") or
                      f"peak {r['peak_mib']:.0f} MiB, {r['tokens_per_s']:,.0f} tokens/s, losses {r['losses']}"),
                      flush=True)
    lines = [f"GPT L{a.n_layer} C{a.n_embd} V{a.vocab}, {a.micro} x {a.seq} tokens a step, world 1 on {a.where or where}",
             "", "| precision | loss_chunk_tokens | peak MiB | step transient MiB | tokens/s | analysis: [tokens, V] MiB "
             "| analysis: [V, C] MiB |", "|---|---|---|---|---|---|---|"]
    for r in cases:
        if "error" in r:
            lines.append(f"| {r['precision']} | {r['loss_chunk_tokens']} | error | | | | |")
        else:
            transient = f"{r['step_transient_mib']:.0f}" if "step_transient_mib" in r else "-"
            lines.append(f"| {r['precision']} | {r['loss_chunk_tokens']} | {r['peak_mib']:.0f} | {transient} | "
                         f"{r['tokens_per_s']:,.1f} | {r['analysis']['tokens_x_vocab_mib']:.0f} | "
                         f"{r['analysis']['vocab_x_c_mib']:.0f} |")
    print("\n".join(lines))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"where": a.where or where, "device": "cuda" if a.gpu else "cpu",
                       "args": {k: v for k, v in vars(a).items() if k not in ("json",)}, "cases": cases,
                       "table": lines}, f, indent=1)
    return 0 if all("error" not in r for r in cases) else 1


if __name__ == "__main__":
    sys.exit(main())
