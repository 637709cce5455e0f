#!/usr/bin/env python3
"""The precision experiment of Hugging Face's "A Hugging Face Accelerate Story of Multiple Backends:
FSDP and DeepSpeed": the same GPT, loaded in bf16, trained with one learning rate under
  deepspeed zero_stage 3   (fp32 master weights and optimizer states, always),
  fsdp FULL_SHARD, precision_mode mixed   (the sharded bf16 parameters upcast to fp32 for the optimizer),
  fsdp FULL_SHARD, precision_mode low     (parameters and master stay bf16: each update is rounded to bf16).
Everything else is identical (bf16 compute, data, seed, schedule, world size). Writes each run's
metrics.jsonl under --out, a PNG of the three loss curves (matplotlib) and a JSON summary.

  scripts/python scripts/precision_experiment.py --out runs/precision --steps 300
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
QUICKSTART = os.path.join(ROOT, "config_templates", "quickstart.yaml")

RUNS = [
    ("deepspeed zero 3", ["backend=deepspeed", "deepspeed.zero_stage=3"]),
    ("fsdp mixed", ["backend=fsdp", "fsdp.sharding_strategy=FULL_SHARD", "fsdp.precision_mode=mixed"]),
    ("fsdp low", ["backend=fsdp", "fsdp.sharding_strategy=FULL_SHARD", "fsdp.precision_mode=low"]),
]


def run(a, name: str, sets: list[str]) -> list[dict]:
    out = os.path.join(os.path.abspath(a.out), name.replace(" ", "_"))
    common = ["main_process_port=0", f"num_processes={a.world}", "model.dtype=bf16", "mixed_precision=bf16",
              f"optimizer.lr={a.lr}", "scheduler.name=constant", "scheduler.warmup_steps=0",
              f"training.max_steps={a.steps}", f"training.eval_every={a.steps}", "training.log_every=50",
              "training.resume=never", f"training.output_dir={out}", f"model.n_layer={a.n_layer}",
              f"model.n_embd={a.n_embd}"]
    cmd = [a.accel, "launch", QUICKSTART] + [x for s in common + sets for x in ("--set", s)]
    print("$ " + " ".join(cmd), file=sys.stderr)
    subprocess.run(cmd, check=True, stdout=sys.stderr)
    with open(os.path.join(out, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


def smooth(values: list[float], window: int) -> list[float]:
    out, acc = [], 0.0
    for i, v in enumerate(values):
        acc += v
        if i >= window:
            acc -= values[i - window]
        out.append(acc / min(i + 1, window))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--accel", default=os.path.join(ROOT, "build", "accel"))
    ap.add_argument("--out", default=os.path.join(ROOT, "runs", "precision"))
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--lr", type=float, default=2e-4)
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--n-layer", type=int, default=2)
    ap.add_argument("--n-embd", type=int, default=128)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    curves = {name: run(a, name, sets) for name, sets in RUNS}

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(8, 5))
    for name, m in curves.items():
        ax.plot([r["step"] + 1 for r in m], smooth([r["loss"] for r in m], 10), label=name)
    ax.set_xlabel("step")
    ax.set_ylabel("training loss (10-step mean)")
    ax.set_title(f"GPT {a.n_layer}x{a.n_embd} loaded in bf16, lr {a.lr:g}, world {a.world}")
    ax.grid(alpha=0.3)
    ax.legend()
    png = os.path.join(a.out, "precision_curves.png")
    fig.savefig(png, dpi=120, bbox_inches="tight")

    summary = {"config": vars(a), "runs": {}}
    for name, m in curves.items():
        last = [r["loss"] for r in m[-20:]]
        evals = [r["eval_loss"] for r in m if "eval_loss" in r]
        summary["runs"][name] = {"first_loss": m[0]["loss"], "final_loss_mean20": sum(last) / len(last),
                                 "final_eval_loss": evals[-1] if evals else None}
    with open(os.path.join(a.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
    print("| run | first loss | final loss (mean of last 20) | final eval loss |")
    print("|---|---|---|---|")
    for name, s in summary["runs"].items():
        print(f"| {name} | {s['first_loss']:.4f} | {s['final_loss_mean20']:.4f} | {s['final_eval_loss']:.4f} |")
    print(f"\nplot: {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
