#!/usr/bin/env python3
"""Numerical cross-check of accel against the real peers: per-step losses, grad norms and final
weights after 20 steps (fp32, and bf16 with --precision bf16 or both), from one init and one token
file at world 2 on the CPU.

Pairs: accel ddp / torch DDP, accel zero k / DeepSpeed zero k (k = 1, 2, 3), accel FULL_SHARD /
FSDP2 and FSDP1, accel SHARD_GRAD_OP / FSDP2 (reshard_after_forward=False) and FSDP1. Every run is
also compared with the reference trainer (scripts/reference/reference_train.py --world 2, fp32,
and fp64 as the yardstick of fp32 rounding), which shows which side of a pair moved.
Tolerances and their reasons: scripts/peers/crosscheck.py. Exit 0 when every pair is within its
tolerance, 1 otherwise.

  scripts/python scripts/crosscheck_peers.py --json /tmp/xcheck.json --markdown /tmp/xcheck.md
  scripts/python scripts/crosscheck_peers.py --precision bf16 --only zero3,full_shard
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [os.path.join(HERE, "peers"), os.path.join(HERE, "reference")]

import crosscheck  # noqa: E402
import procs  # noqa: E402
import report  # noqa: E402
from bench_peers import prebuild_deepspeed_op, prepare_inputs  # noqa: E402
from settings import CONTENDERS, SIZES, RunSpec  # noqa: E402


def fmt(x) -> str:
    return "-" if x is None else f"{x:.2e}"


def check_precision(a, precision: str, work: str, env) -> dict:
    spec = RunSpec(**SIZES["quick"])
    spec.warmup_steps, spec.timed_steps = 0, a.steps
    spec.mixed_precision = precision
    spec.max_grad_norm = a.max_grad_norm
    spec.save_weights, spec.count_comm = True, False
    d = os.path.join(work, precision)
    os.makedirs(d, exist_ok=True)
    prepare_inputs(spec, d)
    if a.bf16_rounded_init:
        round_init_to_bf16(spec.init_path)
    runs = {"reference fp32": crosscheck.run_reference(spec, os.path.join(d, "ref32")),
            "reference fp64": crosscheck.run_reference(spec, os.path.join(d, "ref64"), "float64")}
    keys = []
    for acc, peer in crosscheck.PAIRS:
        if a.only and not any(o in (acc, peer) or o in acc.split("-", 1)[1] for o in a.only.split(",")):
            continue
        for k in (acc, peer):
            if k not in keys:
                keys.append(k)
    by_key = {c.key: c for c in CONTENDERS}
    for k in keys:
        runs[k] = crosscheck.run_training(spec, by_key[k], os.path.join(d, k), a.accel, env, ds_skip_shm=False)
        state = "ok" if runs[k]["ok"] else "FAILED: " + report.headline(runs[k]["reason"])
        print(f"  [{precision}] {by_key[k].name}: {state}", file=sys.stderr)
    tol_pair = crosscheck.TOLERANCES["fp32" if precision == "no" else "bf16"]
    tol_ref = crosscheck.TOLERANCES["fp32" if precision == "no" else "bf16_vs_fp32_reference"]
    pname = "bf16" if precision == "bf16" else "fp32"

    def na(key):
        return None if runs[key].get("ok") else crosscheck.UNSUPPORTED.get((pname, key))
    pairs = []
    for acc, peer in crosscheck.PAIRS:
        if acc in runs and peer in runs:
            c = crosscheck.compare(runs[acc], runs[peer])
            pairs.append({"a": acc, "b": peer, "cmp": c, "ok": crosscheck.within(c, tol_pair), "tol": tol_pair,
                          "na": na(peer),
                          "reason": None if c else (runs[acc].get("reason") or runs[peer].get("reason"))})
    vs_ref = []
    for k in ["reference fp64"] + keys:
        c = crosscheck.compare(runs[k], runs["reference fp32"])
        vs_ref.append({"a": k, "b": "reference fp32", "cmp": c, "ok": crosscheck.within(c, tol_ref), "tol": tol_ref,
                       "na": na(k) if k in by_key else None, "reason": None if c else runs[k].get("reason")})
    infos = {k: runs[k].get("info") for k in keys}
    return {"precision": precision, "steps": spec.steps, "bf16_rounded_init": a.bf16_rounded_init, "spec": spec.to_json(), "pairs": pairs, "vs_reference": vs_ref,
            "losses": {k: r.get("losses") for k, r in runs.items()}, "peer_settings": infos}


def round_init_to_bf16(path: str) -> None:
    """Rewrite the fp32 init file with values that bf16 represents exactly. DeepSpeed builds its fp32
    masters from the bf16 copy of the model (stage_1_and_2.py: the partition of the bit16 groups,
    cloned to fp32), so it loses the init's low mantissa bits; accel and FSDP keep the fp32 values.
    With an init that has no such bits, that difference is gone."""
    import safetensors_io
    import torch
    w = safetensors_io.load_file(path)
    safetensors_io.save_file(type(w)((k, v.to(torch.bfloat16).to(torch.float32)) for k, v in w.items()), path,
                             {"format": "pt", "producer": "crosscheck_peers --bf16-rounded-init"})


def markdown(res: dict) -> str:
    name = {c.key: c.name for c in CONTENDERS}
    p = "fp32" if res["precision"] == "no" else "bf16"
    clip = res["spec"]["max_grad_norm"]
    out = [f"### {p}, {res['steps']} steps, world 2 (GPT 2 x 128, seq 64, micro batch 8, lr 1e-3, "
           f"{'clip ' + str(clip) if clip > 0 else 'no clipping'})", ""]
    for title, rows in (("accel against the peer of the same strategy", res["pairs"]),
                        ("every run against the reference trainer (fp32, one process simulating 2 ranks)",
                         res["vs_reference"])):
        out += [title + ":", "", "| A | B | max abs dloss (step) | first step differing | max rel dgrad_norm "
                "| max abs dweight (tensor) | tolerance loss / weights | within |", "|---|---|---:|---:|---:|---:|---:|---|"]
        for r in rows:
            c, t = r["cmp"], r["tol"]
            a, b = name.get(r["a"], r["a"]), name.get(r["b"], r["b"])
            if r.get("na"):
                out.append(f"| {a} | {b} | - | - | - | - | {t['loss']:.0e} / {t['weights']:.0e} | n/a: {r['na']} |")
                continue
            if not c or "error" in c:
                why = (c or {}).get("error") or report.headline(r.get("reason"), 120)
                out.append(f"| {a} | {b} | - | - | - | - | {t['loss']:.0e} / {t['weights']:.0e} | **failed**: {why} |")
                continue
            out.append(f"| {a} | {b} | {fmt(c['max_dloss'])} ({c['max_dloss_step']}) | {c['first_step_differing']} "
                       f"| {fmt(c['max_dgrad_norm_rel'])} | {fmt(c['max_dweight'])} ({c['max_dweight_tensor']}) "
                       f"| {t['loss']:.0e} / {t['weights']:.0e} | {'yes' if r['ok'] else '**no**'} |")
        out.append("")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--accel", default=os.environ.get("ACCEL_BINARY", os.path.join(ROOT, "build", "accel")))
    ap.add_argument("--precision", choices=("fp32", "bf16", "both"), default="both")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--max-grad-norm", type=float, default=1.0,
                    help="clip norm for every side (1.0); 0 turns clipping off, to separate clipping from the rest")
    ap.add_argument("--bf16-rounded-init", action="store_true",
                    help="round the init weights to bf16 values (stored as fp32) first: shows the effect of "
                         "DeepSpeed building its fp32 masters from the bf16 model")
    ap.add_argument("--only", help="comma list: strategies (zero3, full_shard, ...) or contender keys")
    ap.add_argument("--work-dir", help="keep the run directories here")
    ap.add_argument("--json")
    ap.add_argument("--markdown")
    a = ap.parse_args()
    procs.install_signal_handlers()
    env = dict(os.environ)
    work = a.work_dir or tempfile.mkdtemp(prefix="crosscheck_peers_")
    os.makedirs(work, exist_ok=True)
    results = []
    try:
        pre = prebuild_deepspeed_op(env)
        if not pre["ok"]:
            print("crosscheck_peers: DeepSpeed's shm op did not build; its runs will fail:\n" + pre["reason"], file=sys.stderr)
        for precision in (("no", "bf16") if a.precision == "both" else ("no" if a.precision == "fp32" else "bf16",)):
            results.append(check_precision(a, precision, work, env))
    finally:
        if not a.work_dir:
            shutil.rmtree(work, ignore_errors=True)
    md = "\n".join(markdown(r) for r in results)
    print(md)
    if a.markdown:
        with open(a.markdown, "w") as f:
            f.write(md)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"tolerances": crosscheck.TOLERANCES, "results": results}, f, indent=1)
    bad = [r for res in results for r in res["pairs"] if r["ok"] is not True and not r.get("na")]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
