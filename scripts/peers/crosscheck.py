"""Numerical cross-check: accel against the peer that implements the same strategy, and every run
against the independent reference trainer, from one init on one token file.

run_training() trains one contender for spec.steps steps with its final weights saved;
run_reference() runs scripts/reference/reference_train.py --world W on the same inputs (one
process simulating the W ranks, fp32 or fp64); compare() gives the largest per-step loss
difference, the largest relative grad-norm difference and the largest final weight difference
(and the tensor it is in).

Tolerances (TOLERANCES) and why (measured figures: docs/bench/peers_cpu.md, 20 steps, world 2):
- fp32, lr 1e-3. Every implementation computes the same sums in another order: the reference
  adds the ranks' scaled losses' gradients in one process, DDP and DeepSpeed divide each rank's
  gradient by W before a SUM all-reduce or reduce-scatter, accel's rings and FSDP2's AVG divide
  after summing, and the clip coefficient comes from a norm summed in fp32 (torch), in fp64 per
  tensor (DeepSpeed) or in fp64 from shards (accel). Each reordering moves a value by about one
  fp32 ulp (6e-8 relative). The loss is smooth in the weights and moves by the same order; the
  fp64 reference against the fp32 one (the yardstick of fp32 rounding alone) differs by 6e-7,
  every pair by at most 4.8e-7 (7.2e-7 in session 28's run, where the yardstick was 6.1e-7).
  Loss tolerance 1e-5: 14-20x that. The weights are compared after Adam, whose update
  m/(sqrt(v)+eps) has a size of about lr whatever the gradient's size, so a one-ulp difference in
  a near-zero gradient component can move that component by up to ~2 lr per step; 20 steps x lr =
  2e-2 is a sure but loose bound. Measured: 5e-6 (fp64 vs fp32 reference: 5.8e-6; session 28:
  pairs 4.6e-6, the reference 1.3e-5). Weight tolerance 1e-4: 20x the measured, 200x below the
  bound. Grad norm: 1e-4 relative (measured 2.6e-7).
- bf16: parameters, activations and gradient reductions in bf16 (8-bit mantissa, ulp 2^-8 = 3.9e-3
  relative), fp32 masters and moments, the loss in fp32 (every side upcasts the logits, as accel
  does). Two bf16 implementations round their sums differently by up to a bf16 ulp, so near-zero
  gradient components flip far more often than in fp32 and Adam turns each flip into up to ~2 lr
  of weight difference: the bound 20 x lr = 2e-2 is what is used for weights (measured up to
  1.1e-2, in c_attn biases, whose gradient components are the smallest). Losses: measured up to
  9e-4 between pairs and against the fp32 reference; tolerance 5e-3 (the loss moves ~1e-3 per
  bf16 ulp of weight drift). Grad norms: measured 3.3e-3 relative; tolerance 1e-2 between pairs,
  2e-2 against fp32.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import OrderedDict
from typing import Dict, List, Optional, Tuple

import accel_runner
import python_runner

HERE = os.path.dirname(os.path.abspath(__file__))
REF = os.path.join(os.path.dirname(HERE), "reference")

TOLERANCES = {
    "fp32": {"loss": 1e-5, "weights": 1e-4, "grad_norm_rel": 1e-4},
    "bf16": {"loss": 5e-3, "weights": 2e-2, "grad_norm_rel": 1e-2},
    "bf16_vs_fp32_reference": {"loss": 5e-3, "weights": 2e-2, "grad_norm_rel": 2e-2},
}

# Peers that cannot run a precision on this machine, and why: their pairs are reported as n/a (the
# run is still attempted, so that the table shows the peer's own error).
UNSUPPORTED = {
    ("bf16", "torch-ddp"): "PyTorch DDP's bf16 mixed precision (_MixedPrecision) creates an accelerator stream "
                           "in DistributedDataParallel.__init__ and fails on a CPU-only machine",
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


def run_script(script: str, args: List[str]) -> Tuple[int, str]:
    """scripts/reference/<script> with `args` in a new interpreter: (exit status, stderr)."""
    p = subprocess.run([sys.executable, os.path.join(REF, script)] + args, capture_output=True, text=True,
                       env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"))
    return p.returncode, p.stderr


def run_reference(spec, out_dir: str, dtype: str = "float32", call=run_script) -> Dict[str, object]:
    """The reference trainer on the same init, tokens, batch, schedule and clipping (fp32 or fp64).
    `call(script, args) -> (exit status, stderr)` runs it (default: run_script; the tests call its
    main() in their own process, which has imported torch already)."""
    args = ["--tokens", spec.tokens_path,
            "--init-weights", spec.init_path, "--n-layer", str(spec.n_layer), "--n-head", str(spec.n_head),
            "--n-embd", str(spec.n_embd), "--vocab-size", str(spec.vocab_size), "--block-size", str(spec.seq_len),
            "--seq-len", str(spec.seq_len), "--micro-batch", str(spec.micro_batch), "--world", str(spec.world),
            "--accum", str(spec.accum), "--steps", str(spec.steps), "--lr", repr(spec.lr),
            "--weight-decay", repr(spec.weight_decay), "--beta1", repr(spec.beta1), "--beta2", repr(spec.beta2),
            "--eps", repr(spec.eps), "--warmup", str(spec.sched_warmup), "--min-lr-ratio", repr(spec.min_lr_ratio),
            "--max-grad-norm", repr(spec.max_grad_norm), "--val-fraction", repr(spec.val_fraction),
            "--dtype", dtype, "--out-dir", out_dir, "--quiet", "--threads", str(spec.threads)]
    code, err = call("reference_train.py", args)
    if code != 0:
        return {"ok": False, "reason": f"reference_train.py exit {code}: {err[-2000:]}"}
    with open(os.path.join(out_dir, "metrics.jsonl")) as f:
        recs = [json.loads(line) for line in f if line.strip()]
    wpath = os.path.join(out_dir, "weights_float64.safetensors" if dtype == "float64" else "weights.safetensors")
    return {"ok": True, "losses": [r["loss"] for r in recs], "grad_norms": [r["grad_norm"] for r in recs],
            "weights_path": wpath}


def compare(a: Dict[str, object], b: Dict[str, object]) -> Optional[Dict[str, object]]:
    """Largest differences between two runs: per-step loss, relative grad norm, final weights. A NaN
    difference is the largest (compare_runs.largest), so within() sees it."""
    from compare_runs import largest  # scripts/reference, on sys.path as for safetensors_io
    if not (a.get("ok") and b.get("ok")):
        return None
    la, lb = a["losses"], b["losses"]
    if len(la) != len(lb) or len(a["grad_norms"]) != len(b["grad_norms"]):
        return {"error": f"{len(la)} vs {len(lb)} steps ({len(a['grad_norms'])} vs {len(b['grad_norms'])} grad norms)"}
    if not la:
        return {"error": "no steps to compare"}
    dloss = [abs(x - y) for x, y in zip(la, lb)]
    dnorm = [abs(x - y) / max(abs(y), 1e-30) for x, y in zip(a["grad_norms"], b["grad_norms"])]
    wa, wb = load_weights(a["weights_path"]), load_weights(b["weights_path"])
    if set(wa) != set(wb):
        return {"error": f"weight names differ: {sorted(set(wa) ^ set(wb))[:5]}"}
    if not wa:
        return {"error": "no weights to compare"}
    per_tensor = OrderedDict((n, float((wa[n].double() - wb[n].double()).abs().max())) for n in wa)
    worst = largest(per_tensor)
    step = largest(dict(enumerate(dloss)))
    first = next((i for i, d in enumerate(dloss) if d != 0), None)  # NaN != 0: a NaN step differs
    return {"max_dloss": dloss[step], "max_dloss_step": step, "first_step_differing": first,
            "final_dloss": dloss[-1], "max_dgrad_norm_rel": dnorm[largest(dict(enumerate(dnorm)))],
            "max_dweight": per_tensor[worst], "max_dweight_tensor": worst, "dloss_per_step": dloss}


def within(cmp: Optional[Dict[str, object]], tol: Dict[str, float]) -> Optional[bool]:
    """Every largest difference of compare() within its tolerance; NaN and inf never are."""
    from compare_runs import within as le  # d <= tol for a finite d
    if not cmp or "error" in cmp:
        return None if not cmp else False
    return (le(cmp["max_dloss"], tol["loss"]) and le(cmp["max_dweight"], tol["weights"])
            and le(cmp["max_dgrad_norm_rel"], tol["grad_norm_rel"]))
