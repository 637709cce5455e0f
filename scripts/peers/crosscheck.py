"""Numerical cross-check: accel against the peer that implements the same strategy, and every run
against the independent reference trainer, from one init on one token file.

run_training() trains one contender for spec.steps steps with its final weights saved;
run_reference() runs scripts/reference/reference_train.py --world W on the same inputs (one
process simulating the W ranks, fp32 or fp64); compare() gives the largest per-step loss
difference, the largest relative grad-norm difference and the largest final weight difference
(and the tensor it is in).

Tolerances (TOLERANCES) and why:
- fp32, 20 steps, lr 1e-3. Every implementation computes the same sums in a different order:
  the reference adds the W ranks' gradients in one process (loss scaled by 1/W, accumulated
  in autograd), DDP and DeepSpeed divide each rank's gradient by W before a SUM all-reduce or
  reduce-scatter, accel's rings and FSDP2's AVG divide after summing, DeepSpeed and FSDP1 clip
  with the norm from per-shard partial sums. Each reordering moves a result by about one fp32 ulp
  (6e-8 relative). The loss is a smooth function of the weights and moves by the same order:
  1e-5 absolute on losses of ~5 is 30x the worst drift measured (README numbers below). The
  weights are compared after Adam, whose update m/(sqrt(v)+eps) is of size lr for any gradient
  however small: a one-ulp difference in a near-zero gradient component can change that
  component's update by up to ~lr per step. Over 20 steps at lr 1e-3 a bound of 20 x lr = 2e-2 is
  sure but loose; measured differences are 1e-6..1e-5 (a handful of components), so 1e-4 is used:
  10x the worst measured, 200x below the Adam bound.
- bf16: parameters, activations and gradient reductions in bf16 (8 bits of mantissa, ulp 2^-8 =
  3.9e-3 relative), fp32 masters and moments. Two bf16 implementations differ by rounding order
  in bf16, i.e. up to an ulp of bf16 in a gradient, so their losses can drift by ~1e-3 after 20
  steps; against the fp32 reference, bf16 compute itself moves the loss by ~1e-2. Tolerances:
  bf16 pair 1e-2 in loss, 2e-3 in weights (about lr x 2 per step is the Adam bound; the
  measured values are well inside); bf16 vs fp32 reference 5e-2 in loss.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import OrderedDict
from typing import Dict, Optional

import accel_runner
import python_runner

HERE = os.path.dirname(os.path.abspath(__file__))
REF = os.path.join(os.path.dirname(HERE), "reference")

TOLERANCES = {
    "fp32": {"loss": 1e-5, "weights": 1e-4, "grad_norm_rel": 1e-4},
    "bf16": {"loss": 1e-2, "weights": 2e-3, "grad_norm_rel": 5e-2},
    "bf16_vs_fp32_reference": {"loss": 5e-2, "weights": 2e-2, "grad_norm_rel": 0.5},
}

PAIRS = [  # (accel contender, peer contender)
    ("accel-ddp", "torch-ddp"),
    ("accel-zero1", "deepspeed-zero1"),
    ("accel-zero2", "deepspeed-zero2"),
    ("accel-zero3", "deepspeed-zero3"),
    ("accel-full_shard", "fsdp2-full_shard"),
    ("accel-full_shard", "fsdp1-full_shard"),
    ("accel-shard_grad_op", "fsdp2-shard_grad_op"),
    ("accel-shard_grad_op", "fsdp1-shard_grad_op"),
]


def load_weights(path: str):
    import safetensors_io
    return safetensors_io.load_file(path)


def run_training(spec, contender, run_dir: str, accel: str, env: Dict[str, str], ds_skip_shm: bool = False
                 ) -> Dict[str, object]:
    """{"ok", "reason", "losses", "grad_norms", "weights_path"} for one contender."""
    os.makedirs(run_dir, exist_ok=True)
    try:
        if contender.family == "accel":
            if not os.path.exists(accel):
                return {"ok": False, "reason": f"accel binary not found at {accel}"}
            res, result = accel_runner.run(spec, contender, run_dir, accel, "native", env)
            wpath = os.path.join(run_dir, "run", "weights.safetensors")
        else:
            res, result = python_runner.run(spec, contender, run_dir, env, ds_skip_shm=ds_skip_shm)
            wpath = os.path.join(run_dir, "weights.safetensors")
    except (OSError, ValueError, KeyError) as e:
        return {"ok": False, "reason": f"{type(e).__name__}: {e}"}
    if not res.ok:
        return {"ok": False, "reason": res.reason}
    recs = result["records"]
    return {"ok": True, "losses": [r["loss"] for r in recs], "grad_norms": [r["grad_norm"] for r in recs],
            "weights_path": wpath, "info": result.get("info")}


def run_reference(spec, out_dir: str, dtype: str = "float32") -> Dict[str, object]:
    """The reference trainer on the same init, tokens, batch, schedule and clipping (fp32 or fp64)."""
    cmd = [sys.executable, os.path.join(REF, "reference_train.py"), "--tokens", spec.tokens_path,
           "--init-weights", spec.init_path, "--n-layer", str(spec.n_layer), "--n-head", str(spec.n_head),
           "--n-embd", str(spec.n_embd), "--vocab-size", str(spec.vocab_size), "--block-size", str(spec.seq_len),
           "--seq-len", str(spec.seq_len), "--micro-batch", str(spec.micro_batch), "--world", str(spec.world),
           "--accum", str(spec.accum), "--steps", str(spec.steps), "--lr", repr(spec.lr),
           "--weight-decay", repr(spec.weight_decay), "--beta1", repr(spec.beta1), "--beta2", repr(spec.beta2),
           "--eps", repr(spec.eps), "--warmup", str(spec.sched_warmup), "--min-lr-ratio", repr(spec.min_lr_ratio),
           "--max-grad-norm", repr(spec.max_grad_norm), "--val-fraction", repr(spec.val_fraction),
           "--dtype", dtype, "--out-dir", out_dir, "--quiet", "--threads", str(spec.threads)]
    p = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"))
    if p.returncode != 0:
        return {"ok": False, "reason": f"reference_train.py exit {p.returncode}: {p.stderr[-2000:]}"}
    with open(os.path.join(out_dir, "metrics.jsonl")) as f:
        recs = [json.loads(line) for line in f if line.strip()]
    wpath = os.path.join(out_dir, "weights_float64.safetensors" if dtype == "float64" else "weights.safetensors")
    return {"ok": True, "losses": [r["loss"] for r in recs], "grad_norms": [r["grad_norm"] for r in recs],
            "weights_path": wpath}


def compare(a: Dict[str, object], b: Dict[str, object]) -> Optional[Dict[str, object]]:
    """Largest differences between two runs: per-step loss, relative grad norm, final weights."""
    if not (a.get("ok") and b.get("ok")):
        return None
    la, lb = a["losses"], b["losses"]
    if len(la) != len(lb):
        return {"error": f"{len(la)} vs {len(lb)} steps"}
    dloss = [abs(x - y) for x, y in zip(la, lb)]
    dnorm = [abs(x - y) / max(abs(y), 1e-30) for x, y in zip(a["grad_norms"], b["grad_norms"])]
    wa, wb = load_weights(a["weights_path"]), load_weights(b["weights_path"])
    if set(wa) != set(wb):
        return {"error": f"weight names differ: {sorted(set(wa) ^ set(wb))[:5]}"}
    per_tensor = OrderedDict((n, float((wa[n].double() - wb[n].double()).abs().max())) for n in wa)
    worst = max(per_tensor, key=per_tensor.get)
    first = next((i for i, d in enumerate(dloss) if d > 0), None)
    return {"max_dloss": max(dloss), "max_dloss_step": dloss.index(max(dloss)), "first_step_differing": first,
            "final_dloss": dloss[-1], "max_dgrad_norm_rel": max(dnorm), "max_dweight": per_tensor[worst],
            "max_dweight_tensor": worst, "dloss_per_step": dloss}


def within(cmp: Optional[Dict[str, object]], tol: Dict[str, float]) -> Optional[bool]:
    if not cmp or "error" in cmp:
        return None if not cmp else False
    return (cmp["max_dloss"] <= tol["loss"] and cmp["max_dweight"] <= tol["weights"]
            and cmp["max_dgrad_norm_rel"] <= tol["grad_norm_rel"])
