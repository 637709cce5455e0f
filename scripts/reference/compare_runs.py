#!/usr/bin/env python3
"""Compare two training runs (metrics.jsonl + weights.safetensors), e.g. accel against the reference.

Per step: |loss_a - loss_b|, |lr_a - lr_b|, relative grad_norm difference. Per tensor: max |w_a - w_b|.
Exit 0 when every difference is within its tolerance, 1 otherwise, 2 on unreadable inputs.

  compare_runs.py runs/accel runs/reference --loss-tol 1e-4 --weight-tol 1e-3
"""
from __future__ import annotations

import argparse
import json
import os
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def read_metrics(d):
    with open(os.path.join(d, "metrics.jsonl")) as f:
        return {int(r["step"]): r for r in (json.loads(line) for line in f if line.strip())}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="Compare two runs' losses, lrs, grad norms and final weights.")
    p.add_argument("a", help="run directory A (metrics.jsonl, weights.safetensors)")
    p.add_argument("b", help="run directory B")
    p.add_argument("--loss-tol", type=float, default=1e-4, help="max |loss_a - loss_b| (1e-4)")
    p.add_argument("--lr-tol", type=float, default=1e-12, help="max |lr_a - lr_b| (1e-12)")
    p.add_argument("--grad-norm-rtol", type=float, default=1e-3, help="max relative grad_norm difference (1e-3)")
    p.add_argument("--weight-tol", type=float, default=1e-3, help="max |w_a - w_b| over all tensors (1e-3)")
    p.add_argument("--step-offset", type=int, default=0, help="B's step = A's step + offset (e.g. 1-based logs)")
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
    for s in common:
        ra, rb = ma[s], mb[s + a.step_offset]
        dl = abs(ra["loss"] - rb["loss"])
        dlr = abs(ra["lr"] - rb["lr"])
        dg = abs(ra["grad_norm"] - rb["grad_norm"]) / max(abs(ra["grad_norm"]), 1e-30)
        worst["loss"], worst["lr"] = max(worst["loss"], dl), max(worst["lr"], dlr)
        worst["grad_norm_rel"] = max(worst["grad_norm_rel"], dg)
        bad = dl > a.loss_tol or dlr > a.lr_tol or dg > a.grad_norm_rtol
        if bad:
            ok = False
            print(f"step {s}: loss {ra['loss']:.8g} vs {rb['loss']:.8g}, lr {ra['lr']:.8g} vs {rb['lr']:.8g}, "
                  f"grad_norm {ra['grad_norm']:.8g} vs {rb['grad_norm']:.8g}  <-- over tolerance")
    print(f"metrics: {len(common)} steps, max |dloss| {worst['loss']:.3e}, max |dlr| {worst['lr']:.3e}, "
          f"max grad_norm rel diff {worst['grad_norm_rel']:.3e}")
    wa_path, wb_path = (os.path.join(d, "weights.safetensors") for d in (a.a, a.b))
    if os.path.exists(wa_path) and os.path.exists(wb_path):
        import safetensors_io
        wa, wb = safetensors_io.load_file(wa_path), safetensors_io.load_file(wb_path)
        if list(wa) != list(wb) and set(wa) != set(wb):
            print(f"weights: names differ: only in A {sorted(set(wa) - set(wb))[:5]}, "
                  f"only in B {sorted(set(wb) - set(wa))[:5]}")
            ok = False
        else:
            diffs = {n: float((wa[n].double() - wb[n].double()).abs().max()) if wa[n].shape == wb[n].shape
                     else float("inf") for n in wa}
            name = max(diffs, key=diffs.get)
            print(f"weights: {len(diffs)} tensors, max |dw| {diffs[name]:.3e} ({name})")
            ok = ok and diffs[name] <= a.weight_tol
    else:
        print("weights: not compared (weights.safetensors missing in a run)")
    print("OK" if ok else "DIFFERENT")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
