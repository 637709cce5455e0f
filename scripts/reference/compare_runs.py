#!/usr/bin/env python3
"""Compare two training runs (metrics.jsonl + weights.safetensors), e.g. accel against the reference.

Per step: |loss_a - loss_b|, |lr_a - lr_b|, relative grad_norm difference. Per tensor: max |w_a - w_b|.
Exit 0 when every difference is within its tolerance, 1 otherwise, 2 on unreadable inputs. A NaN or
infinite value or difference is over every tolerance; so is a run without weights.safetensors
(unless --metrics-only) and a comparison of no steps or no tensors.

  compare_runs.py runs/accel runs/reference --loss-tol 1e-4 --weight-tol 1e-3
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def read_metrics(d):
    with open(os.path.join(d, "metrics.jsonl")) as f:
        return {int(r["step"]): r for r in (json.loads(line) for line in f if line.strip())}


def nan_first(x):
    """max() key ranking NaN above every number, +inf included. Plain max() keeps a NaN only when it
    comes first (every comparison with NaN is False), so a later NaN would be passed over."""
    return (1, 0.0) if math.isnan(x) else (0, x)


def largest(diffs):
    """The key of the largest value of the dict `diffs`, NaN ranked largest (nan_first)."""
    return max(diffs, key=lambda k: nan_first(diffs[k]))


def within(d, tol):
    """d <= tol for a finite d; NaN and +-inf are never within a tolerance."""
    return math.isfinite(d) and d <= tol


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="Compare two runs' losses, lrs, grad norms and final weights.")
    p.add_argument("a", help="run directory A (metrics.jsonl, weights.safetensors)")
    p.add_argument("b", help="run directory B")
    p.add_argument("--loss-tol", type=float, default=1e-4, help="max |loss_a - loss_b| (1e-4)")
    p.add_argument("--lr-tol", type=float, default=1e-12, help="max |lr_a - lr_b| (1e-12)")
    p.add_argument("--grad-norm-rtol", type=float, default=1e-3, help="max relative grad_norm difference (1e-3)")
    p.add_argument("--weight-tol", type=float, default=1e-3, help="max |w_a - w_b| over all tensors (1e-3)")
    p.add_argument("--key-bias-tol", type=float, default=None,
                   help="compare the attention key bias (the middle third of every attn.c_attn.bias) apart, at this "
                        "bound: its true gradient is zero (softmax ignores a shift shared by a query's scores), so "
                        "it moves by rounding noise through Adam alone, differently on another device")
    p.add_argument("--step-offset", type=int, default=0, help="B's step = A's step + offset (e.g. 1-based logs)")
    p.add_argument("--metrics-only", action="store_true",
                   help="compare metrics.jsonl only (else a missing weights.safetensors is a difference)")
    a = p.parse_args(argv)
    try:
        ma, mb = read_metrics(a.a), read_metrics(a.b)
    except (OSError, ValueError, KeyError) as e:
        print(f"compare_runs: error: {e}", file=sys.stderr)
        return 2
    ok = True
    worst = {"loss": 0.0, "lr": 0.0, "grad_norm_rel": 0.0}
    common = [s for s in sorted(ma) if s + a.step_offset in mb]
    if len(common) != len(ma) or len(common) != len(mb):
        print(f"steps differ: A has {len(ma)}, B has {len(mb)}, {len(common)} in common")
        ok = False
    if not common:
        print("metrics: no step to compare")
        ok = False
    for s in common:
        ra, rb = ma[s], mb[s + a.step_offset]
        dl = abs(ra["loss"] - rb["loss"])
        dlr = abs(ra["lr"] - rb["lr"])
        dg = abs(ra["grad_norm"] - rb["grad_norm"]) / max(abs(ra["grad_norm"]), 1e-30)
        for key, d in (("loss", dl), ("lr", dlr), ("grad_norm_rel", dg)):
            worst[key] = max(worst[key], d, key=nan_first)
        bad = not (within(dl, a.loss_tol) and within(dlr, a.lr_tol) and within(dg, a.grad_norm_rtol))
        if bad:
            ok = False
            print(f"step {s}: loss {ra['loss']:.8g} vs {rb['loss']:.8g}, lr {ra['lr']:.8g} vs {rb['lr']:.8g}, "
                  f"grad_norm {ra['grad_norm']:.8g} vs {rb['grad_norm']:.8g}  <-- over tolerance")
    print(f"metrics: {len(common)} steps, max |dloss| {worst['loss']:.3e}, max |dlr| {worst['lr']:.3e}, "
          f"max grad_norm rel diff {worst['grad_norm_rel']:.3e}")
    if a.metrics_only:
        print("weights: not compared (--metrics-only)")
    else:
        try:
            ok = compare_weights(a.a, a.b, a.weight_tol, a.key_bias_tol) and ok
        except (OSError, ValueError) as e:
            print(f"compare_runs: error: {e}", file=sys.stderr)
            return 2
    print("OK" if ok else "DIFFERENT")
    return 0 if ok else 1


KEY_BIAS_SUFFIX = "attn.c_attn.bias"  # q, k, v biases in that order (gpt_model.CausalSelfAttention)


def split_key_bias(w):
    """w with every attention key bias taken out into its own "<name>[key]" tensor (the rest keeps the
    name: the query and value biases)."""
    import torch
    out = {}
    for n, t in w.items():
        if n.endswith(KEY_BIAS_SUFFIX) and t.dim() == 1 and t.numel() % 3 == 0:
            c = t.numel() // 3
            out[n] = torch.cat([t[:c], t[2 * c:]])
            out[n + "[key]"] = t[c:2 * c]
        else:
            out[n] = t
    return out


def compare_weights(dir_a, dir_b, tol, key_bias_tol=None) -> bool:
    """Prints the largest |w_a - w_b| over the runs' weights.safetensors; True when it is within tol
    (the attention key biases within key_bias_tol instead, when given: split_key_bias).
    A missing file, differing names or shapes, no tensors, or a NaN/inf in either run's tensors are
    differences; an unreadable file raises (OSError, ValueError)."""
    paths = {run: os.path.join(d, "weights.safetensors") for run, d in (("A", dir_a), ("B", dir_b))}
    missing = [f"{run} ({path})" for run, path in paths.items() if not os.path.exists(path)]
    if missing:
        print(f"weights: weights.safetensors missing in {', '.join(missing)} (--metrics-only compares metrics only)")
        return False
    import safetensors_io
    import torch
    wa, wb = (safetensors_io.load_file(paths[run]) for run in ("A", "B"))
    if key_bias_tol is not None:
        wa, wb = split_key_bias(wa), split_key_bias(wb)
    if set(wa) != set(wb):
        print(f"weights: names differ: only in A {sorted(set(wa) - set(wb))[:5]}, "
              f"only in B {sorted(set(wb) - set(wa))[:5]}")
        return False
    if not wa:
        print("weights: no tensor to compare")
        return False
    ok = True
    for run, w in (("A", wa), ("B", wb)):
        bad = [n for n, t in w.items() if not bool(torch.isfinite(t).all())]
        if bad:
            print(f"weights: NaN or inf in {run}'s {bad[:5]}{' ...' if len(bad) > 5 else ''}")
            ok = False
    shapes = [f"{n} {tuple(wa[n].shape)} vs {tuple(wb[n].shape)}" for n in wa if wa[n].shape != wb[n].shape]
    if shapes:
        print(f"weights: shapes differ: {shapes[:5]}")
        ok = False
    diffs = {n: float("inf") if wa[n].shape != wb[n].shape else 0.0 if wa[n].numel() == 0
             else float((wa[n].double() - wb[n].double()).abs().max()) for n in wa}
    keys = {n: d for n, d in diffs.items() if n.endswith("[key]")} if key_bias_tol is not None else {}
    if keys:
        worst_key = largest(keys)
        print(f"weights: attention key biases apart (zero true gradient), max |dw| {keys[worst_key]:.3e} "
              f"({worst_key}), bound {key_bias_tol:.1e}")
        ok = within(keys[worst_key], key_bias_tol) and ok
        diffs = {n: d for n, d in diffs.items() if n not in keys}
    name = largest(diffs)
    print(f"weights: {len(diffs)} tensors, max |dw| {diffs[name]:.3e} ({name})")
    return ok and within(diffs[name], tol)


if __name__ == "__main__":
    sys.exit(main())
