#!/usr/bin/env python3
"""summary.json of a GPU check (scripts/gpu_run.sh): what ran, how it ended, and every figure.

Reads gpu_run.sh's logs folder: steps.tsv (step, exit code, seconds), one log per step, the
benchmark's bench_gpu.json and `accel bench comm`'s bench_comm.json. Writes
  machine      the GPU, driver and torch as the logs show them;
  steps        each step's exit code, status (passed, failed, timed out, skipped: no GPU) and seconds,
               and the end of the log of each one that did not pass;
  accuracy     every comparison the engine tests printed: the run, what it was compared with, max
               |dloss|, max relative grad-norm difference, max |dw| with the tensor it came from
               (the attention key biases apart);
  benchmark    per contender tokens/s, step time, MFU, peak memory, and ratios to FSDP2 and eager;
               the goals (accel zero 3 at >= 1.1x FSDP2's tokens/s, >= 45% MFU) and whether they hold;
  memory       `accel estimate-memory`'s step peak against each job's measured GPU peak
               (scripts/bench_gpu_memory.py);
  comm_bench   `accel bench comm`'s figures.
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
    """The comparisons test_cuda_engine.py prints, from every engine_*.log."""
    figures = []
    for name in sorted(os.listdir(logs)):
        if not (name.startswith("engine_") and name.endswith(".log")):
            continue
        text = read(os.path.join(logs, name))
        # "[run] vs the CPU reference:" then compare_runs.py's lines.
        for m in re.finditer(r"\[(\S+)\] vs the CPU reference:\n((?:(?:metrics|weights|OK|DIFFERENT|step \d+).*\n?)*)",
                             text):
            block = m.group(2)
            f = {"test": name[:-4], "run": m.group(1), "against": "the CPU reference (fp32)"}
            mm = re.search(rf"max \|dloss\| {FLOAT}, max \|dlr\| {FLOAT}, max grad_norm rel diff {FLOAT}", block)
            if mm:
                f.update(max_dloss=float(mm.group(1)), max_grad_norm_rel=float(mm.group(3)))
            mk = re.search(rf"key biases apart .*max \|dw\| {FLOAT} \((\S+)\), bound {FLOAT}", block)
            if mk:
                f.update(key_bias_max_dw=float(mk.group(1)), key_bias_tensor=mk.group(2),
                         key_bias_bound=float(mk.group(3)))
            mw = re.search(rf"weights: \d+ tensors, max \|dw\| {FLOAT} \((\S+)\)", block)
            if mw:
                f.update(max_dw=float(mw.group(1)), max_dw_tensor=mw.group(2))
            f["within_bounds"] = "OK" in block.split("\n")
            figures.append(f)
        # "[bf16 run] vs accel bf16 on the CPU: max |dloss| X, grad norm rel Y" (fp16: no norm).
        for m in re.finditer(rf"\[(\w+) (\S+)\] vs accel (\w+) on the CPU: max \|dloss\| {FLOAT}"
                             rf"(?:, grad norm rel {FLOAT})?", text):
            f = {"test": name[:-4], "run": f"{m.group(1)} {m.group(2)}", "against": f"accel {m.group(3)} on the CPU",
                 "max_dloss": float(m.group(4))}
            if m.group(5):
                f["max_grad_norm_rel"] = float(m.group(5))
            figures.append(f)
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
    summary = {"rehearsal": a.rehearse, **machine(a.logs, a.stage), "steps": steps,
               "accuracy": engine_figures(a.logs), "benchmark": benchmark(a.logs),
               "step_profile": step_profile(a.logs), "accel_step_profile": step_profile(a.logs, "profile_accel_step.json"),
               "memory": memory(a.logs),
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
    if any(s["exit_code"] == 2 and s["step"] in ("torch_check", "linkage") for s in steps):
        return 2
    return 0 if summary["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
