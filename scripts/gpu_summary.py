#!/usr/bin/env python3
"""summary.json of a GPU check (scripts/gpu_run.sh): what ran, how it ended, and every figure.

Reads gpu_run.sh's logs folder: steps.tsv (step, exit code, seconds), one log per step, the
benchmark's bench_gpu.json and `accel bench comm`'s bench_comm.json. Writes
  machine      the GPU, driver and torch as the logs show them;
  steps        each step's exit code, status (passed, failed, timed out, skipped: no GPU) and seconds,
               and the end of the log of each one that did not pass;
  accuracy     every comparison the engine tests printed: the run, what it was compared with, its
               largest relative loss and grad-norm differences and the weight difference nearest
               its bound (tensor named), each with the bound derived in the test, its largest weight
               difference and its case / noise ratio;
  benchmark    per contender tokens/s, step time, MFU, peak memory, and ratios to FSDP2 and eager;
               the goals (accel zero 3 at >= 1.1x FSDP2's tokens/s, >= 45% MFU) and whether they hold;
  memory       `accel estimate-memory`'s step peak against each job's measured GPU peak
               (scripts/bench_gpu_memory.py);
  comm_bench   `accel bench comm`'s figures;
  chunked_loss the plain loss against the chunked one (scripts/bench_chunked_loss.py).
Exit status: 0 when every step passed (in a rehearsal, passed or skipped for want of a GPU), 1 when
one did not, 2 when the staged programs could not run (torch differs, a library is missing).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys

SKIPPED = 77  # a GPU test's exit code where no GPU is visible (ctest's SKIP_RETURN_CODE)
TIMED_OUT = (124, 137)
GOAL_VS_FSDP2 = 1.1
GOAL_MFU = 0.45
FLOAT = r"([-+0-9.eE]+|nan|inf)"


def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def status_of(rc, rehearse):
    if rc == 0:
        return "passed"
    if rc == SKIPPED:
        return "skipped: no GPU" if rehearse else "failed: skipped on the GPU machine (no GPU visible)"
    if rc in TIMED_OUT:
        return "timed out"
    return "failed"


def read_steps(logs, rehearse):
    steps = []
    for line in read(os.path.join(logs, "steps.tsv")).splitlines():
        name, rc, seconds = line.split("\t")
        s = {"step": name, "exit_code": int(rc), "status": status_of(int(rc), rehearse), "seconds": float(seconds)}
        if s["status"] not in ("passed", "skipped: no GPU"):
            s["log_tail"] = read(os.path.join(logs, name + ".log"))[-3000:]
        steps.append(s)
    return steps


def engine_figures(logs):
    """The comparisons test_cuda_engine.py prints, from every engine_*.log: a header "[run] vs
    <against>..." then reordering_noise.row's line (each figure against its derived bound)."""
    figures = []
    row = (rf"\[([^\]\n]+)\] vs (the CPU reference \(fp32\)|accel \w+ on the CPU)[^\n]*\n"
           rf"\s+.+? loss {FLOAT} / {FLOAT}, grad norm {FLOAT} / {FLOAT}, weight {FLOAT} / {FLOAT} \((\S+)\), "
           rf"largest weight difference {FLOAT}; case/noise {FLOAT}")
    for name in sorted(os.listdir(logs)):
        if not (name.startswith("engine_") and name.endswith(".log")):
            continue
        for m in re.finditer(row, read(os.path.join(logs, name))):
            g = m.groups()
            loss, loss_bound, norm, norm_bound, w, w_bound = (float(x) for x in g[2:8])
            figures.append({"test": name[:-4], "run": g[0], "against": g[1], "max_loss_rel": loss,
                            "loss_bound": loss_bound, "max_grad_norm_rel": norm, "grad_norm_bound": norm_bound,
                            "weight_nearest_its_bound": w, "its_bound": w_bound, "tensor": g[8],
                            "max_dw": float(g[9]), "case_noise": float(g[10]),
                            "within_bounds": loss <= loss_bound and norm <= norm_bound and w <= w_bound})
    return figures


def benchmark(logs):
    path = os.path.join(logs, "bench_gpu.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        b = json.load(f)
    by = {r["contender"]: r for r in b["results"] if "error" not in r}
    rows = []
    for r in b["results"]:
        row = dict(r)
        for peer in ("fsdp2", "torch-eager"):
            if "error" not in r and peer in by:
                row[f"vs_{peer}"] = r["tokens_per_s"] / by[peer]["tokens_per_s"]
        rows.append(row)
    z3 = by.get("accel-zero3")
    goals = {
        "accel-zero3 tokens/s >= 1.1x fsdp2": (z3["tokens_per_s"] / by["fsdp2"]["tokens_per_s"] >= GOAL_VS_FSDP2
                                               if z3 and "fsdp2" in by else None),
        "accel-zero3 MFU >= 45%": (z3["mfu"] >= GOAL_MFU if z3 and z3.get("mfu") is not None else None),
    }
    return {"gpu": b["gpu"], "peak_tflops": b["peak_tflops"], "flops_per_token": b["flops_per_token"],
            "model": {k: b["args"][k] for k in ("n_layer", "n_head", "n_embd", "vocab", "seq", "micro", "steps",
                                                 "warmup", "dry_run")},
            "results": rows, "goals": goals, "table": read(os.path.join(logs, "bench_gpu.md"))}


def step_profile(logs, name="profile_gpu_step.json"):
    path = os.path.join(logs, name)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def memory(logs):
    path = os.path.join(logs, "bench_gpu_memory.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)["results"]


def machine(logs, stage):
    return {"machine": read(os.path.join(logs, "machine.log")).strip().splitlines(),
            "torch_built": read(os.path.join(stage, "torch_build.txt")).strip(),
            "torch_errors": read(os.path.join(logs, "torch.log")).strip()[-1000:]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--logs", required=True)
    ap.add_argument("--stage", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--rehearse", action="store_true")
    a = ap.parse_args(argv)
    steps = read_steps(a.logs, a.rehearse)
    comm = os.path.join(a.logs, "bench_comm.json")
    chunked = os.path.join(a.logs, "bench_chunked_loss.json")
    summary = {"rehearsal": a.rehearse, **machine(a.logs, a.stage), "steps": steps,
               "accuracy": engine_figures(a.logs), "benchmark": benchmark(a.logs),
               "step_profile": step_profile(a.logs), "accel_step_profile": step_profile(a.logs, "profile_accel_step.json"),
               "memory": memory(a.logs),
               "chunked_loss": json.loads(read(chunked)) if os.path.exists(chunked) and read(chunked).strip() else None,
               "comm_bench": json.loads(read(comm)) if os.path.exists(comm) and read(comm).strip() else None}
    ok = [s["status"] in ("passed", "skipped: no GPU") for s in steps]
    summary["passed"] = bool(steps) and all(ok)
    with open(a.out, "w") as f:
        json.dump(summary, f, indent=1)
    for s in steps:
        print(f"{s['step']:<48} {s['status']:<18} {s['seconds']:7.1f} s")
    for f in summary["accuracy"]:
        print("accuracy:", json.dumps(f))
    if summary["benchmark"]:
        print(summary["benchmark"]["table"])
        print("goals:", json.dumps(summary["benchmark"]["goals"]))
    for label, key in (("eager", "step_profile"), ("accel zero 3", "accel_step_profile")):
        p = summary[key]
        if not p:
            continue
        print(f"step profile, {label} ({p['device']}): step {p['step_ms']:.1f} ms, device busy "
              f"{p['busy_ms_per_step']:.1f} ms, {p['kernels_per_step']:.0f} kernels; ms by kind:",
              ", ".join(f"{k} {v:.2f}" for k, v in p["ms_per_step_by_kind"].items()))
        for t in p["top"][:10]:
            print(f"  {t['ms_per_step']:7.2f} ms x{t['calls_per_step']:.0f} {t['kind']:<13} {t['name'][:100]}")
    for r in summary["memory"] or []:
        print(f"memory: {r['case']}: " + (r["error"][-200:] if "error" in r else
              f"measured {r['measured_peak'] / 2 ** 30:.2f} GiB, estimate {r['estimate_peak'] / 2 ** 30:.2f} GiB, "
              f"ratio {r['ratio']:.3f}"))
    if summary["chunked_loss"]:
        print("\n".join(summary["chunked_loss"]["table"]))
    if any(s["exit_code"] == 2 and s["step"] in ("torch_check", "linkage") for s in steps):
        return 2
    return 0 if summary["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
