"""From the runs of every contender to one summary per contender, the markdown table and the JSON.

Per run (one contender, one repeat): tokens/s = tokens per step / the median step time over the
timed steps (after the warm-up steps). Per contender: the median over repeats of that figure; peak
RSS per rank (VmHWM, median over repeats); model-state bytes per rank (the tensors its backend or
optimizer holds between steps: accel's run report, state_bytes.py for the peers); bytes moved per
step (bus bytes, accel's convention, comm_count.py); the loss after every step (first repeat; the
runs of one contender are checked to agree). A failed run keeps its reason and the contender is a
"failed" row.
"""
from __future__ import annotations

import statistics
from typing import Dict, List, Optional

MIB = 2.0 ** 20


def run_summary(spec, result: Dict) -> Dict[str, object]:
    recs = result["records"]
    timed = [r for r in recs if r["step"] >= spec.warmup_steps]
    med = statistics.median(r["step_time_s"] for r in timed) if timed else float("nan")
    return {"tokens_per_s": spec.tokens_per_step / med if timed else None, "step_time_s_median": med,
            "losses": [r["loss"] for r in recs], "grad_norms": [r["grad_norm"] for r in recs],
            "peak_rss_bytes": [rk.get("peak_rss_bytes") for rk in result["ranks"]],
            "model_state_bytes": [rk.get("model_state_bytes") for rk in result["ranks"]],
            "transient_bytes": [rk.get("transient_bytes") for rk in result["ranks"]],
            "comm_per_step": result["ranks"][0].get("comm_per_step")}


def derived_ddp_comm(spec, counted: Optional[Dict]) -> Dict[str, object]:
    """PyTorch DDP's reducer all-reduces every gradient once per step from C++, out of comm_count's
    sight: add that all-reduce (the parameter count in the reduce dtype) to what was counted."""
    n = spec.world
    dtype_bytes = 2 if spec.mixed_precision == "bf16" else 4
    payload = spec.num_params() * dtype_bytes
    bus = payload * 2.0 * (n - 1) / n
    counted_bus = (counted or {}).get("bus_bytes", 0.0)
    return {"bus_bytes": bus + counted_bus, "derived": True,
            "note": "gradient all-reduce derived (every gradient once per step; DDP's reducer runs in C++)",
            "counted": counted}


def contender_summary(spec, contender, runs: List[Dict]) -> Dict[str, object]:
    ok = [r for r in runs if r.get("ok")]
    out: Dict[str, object] = {"key": contender.key, "name": contender.name, "family": contender.family,
                              "strategy": contender.strategy, "runs": len(runs), "ok_runs": len(ok)}
    if not ok:
        out["status"] = "failed"
        out["reason"] = next((r.get("reason") for r in runs if r.get("reason")), "no run")
        return out
    sums = [r["summary"] for r in ok]
    out["status"] = "ok" if len(ok) == len(runs) else f"{len(runs) - len(ok)} of {len(runs)} runs failed"
    if len(ok) != len(runs):
        out["reason"] = next(r.get("reason") for r in runs if not r.get("ok"))
    out["tokens_per_s"] = statistics.median(s["tokens_per_s"] for s in sums)
    out["tokens_per_s_runs"] = [s["tokens_per_s"] for s in sums]
    out["step_time_s_median"] = statistics.median(s["step_time_s_median"] for s in sums)
    ranks = len(sums[0]["peak_rss_bytes"])
    out["peak_rss_bytes"] = [statistics.median(s["peak_rss_bytes"][i] for s in sums) for i in range(ranks)]
    out["model_state_bytes"] = sums[0]["model_state_bytes"]
    out["transient_bytes"] = sums[0]["transient_bytes"]
    comm = sums[0]["comm_per_step"]
    if contender.family in ("torch", "accelerate"):
        comm = derived_ddp_comm(spec, comm)
    out["comm_per_step"] = comm
    out["losses"] = sums[0]["losses"]
    out["grad_norms"] = sums[0]["grad_norms"]
    out["losses_equal_across_repeats"] = all(s["losses"] == sums[0]["losses"] for s in sums)
    out["final_loss"] = sums[0]["losses"][-1]
    return out


def headline(reason: Optional[str], width: int = 200) -> str:
    """The line of a failure reason that says what went wrong: the last error-looking line of the
    log tail (an exception, an `error:`, an abort), else the first line."""
    lines = [ln.strip() for ln in (reason or "").strip().splitlines() if ln.strip()]
    if not lines:
        return "(no reason given)"
    keys = ("Error", "error:", "Exception", "terminate called", "Killed", "Traceback", "timed out", "Aborted")
    hits = [ln for ln in lines[1:] if any(k in ln for k in keys) and not ln.startswith("Traceback")]
    detail = hits[-1] if hits else ""
    first = lines[0].split(";")[0]
    text = f"{first}: {detail}" if detail else first
    return text[:width]


def _mib(b) -> str:
    return "-" if b is None else f"{b / MIB:.1f}"


def markdown(spec, summaries: List[Dict], meta: Dict) -> str:
    lines = []
    lines.append(f"GPT {spec.n_layer} x {spec.n_embd} ({spec.n_head} heads, {spec.num_params():,} parameters), "
                 f"seq {spec.seq_len}, world {spec.world} x micro batch {spec.micro_batch} x accum {spec.accum} "
                 f"= {spec.tokens_per_step:,} tokens/step, {spec.mixed_precision if spec.mixed_precision != 'no' else 'fp32'}; "
                 f"{spec.warmup_steps} warm-up + {spec.timed_steps} timed steps, {meta['repeat']} repeat(s) "
                 f"alternating contenders; OMP_NUM_THREADS={spec.threads} per rank; torch {meta.get('torch')}, "
                 f"deepspeed {meta.get('deepspeed')}, accelerate {meta.get('accelerate')}; "
                 f"load average {meta.get('load_before')} before, {meta.get('load_after')} after"
                 + ("; **other jobs were running (timings are rough)**" if meta.get("loaded") else "") + ".")
    lines.append("")
    lines.append("| strategy | contender | tokens/s (median) | vs accel | step (ms) | over floor (ms) "
                 "| peak RSS r0 / r1 (MiB) | model states r0 (MiB) | comm/step (MiB) | final loss | status |")
    lines.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    accel_tps = {s["strategy"]: s.get("tokens_per_s") for s in summaries
                 if s["family"] == "accel" and s.get("tokens_per_s")}
    floor = next((s for s in summaries if s["family"] == "floor" and s["status"] != "failed"), None)
    for s in summaries:
        if s["status"] == "failed":
            why = headline(s.get("reason")).replace("|", "/")
            lines.append(f"| {s['strategy']} | {s['name']} | - | - | - | - | - | - | - | - | **failed**: {why} |")
            continue
        over = "-" if floor is None else f"{(s['step_time_s_median'] - floor['step_time_s_median']) * 1e3:+.1f}"
        if s["family"] == "floor":
            rss = " / ".join(_mib(b) for b in s["peak_rss_bytes"])
            lines.append(f"| floor | {s['name']} ({spec.world} solo ranks at once) | {s['tokens_per_s']:,.0f} | - "
                         f"| {s['step_time_s_median'] * 1e3:.1f} | 0 | {rss} | - | 0 | (world 1) | {s['status']} |")
            continue
        tps = s["tokens_per_s"]
        ref = accel_tps.get(s["strategy"])
        vs = "1.00" if s["family"] == "accel" else (f"accel {ref / tps:.2f}x" if ref else "-")
        rss = " / ".join(_mib(b) for b in s["peak_rss_bytes"])
        comm = s.get("comm_per_step") or {}
        cb = comm.get("bus_bytes")
        comm_s = "n/a" if cb is None else (_mib(cb) + (" (derived)" if comm.get("derived") else ""))
        lines.append(f"| {s['strategy']} | {s['name']} | {tps:,.0f} | {vs} | {s['step_time_s_median'] * 1e3:.1f} "
                     f"| {over} | {rss} | {_mib(s['model_state_bytes'][0])} | {comm_s} | {s['final_loss']:.5f} | {s['status']} |")
    lines.append("")
    lines.append("Loss after every step (the mean over ranks of the step's micro-batch losses, before the update):")
    lines.append("")
    ok = [s for s in summaries if s["status"] != "failed" and s["family"] != "floor"]  # the floor trains world 1
    if ok:
        steps = len(ok[0]["losses"])
        lines.append("| contender | " + " | ".join(str(i) for i in range(steps)) + " |")
        lines.append("|---|" + "---:|" * steps)
        for s in ok:
            lines.append(f"| {s['name']} | " + " | ".join(f"{x:.4f}" for x in s["losses"]) + " |")
    if floor is not None:
        lines.append("")
        lines.append(f"The floor is {spec.world} single-rank runs started at once, each with one rank's batch and "
                     f"{spec.threads} thread(s), nothing to communicate (scripts/peers/floor_runner.py): accel's own "
                     f"compute, with no data parallelism to pay for. \"Over floor\" is a contender's step minus the "
                     f"floor's: its collectives, copies, waits and overhead.")
        ceilings = [f"{s['name']} {floor['tokens_per_s'] / s['tokens_per_s']:.2f}x" for s in summaries
                    if s["family"] not in ("accel", "accel_tcp", "floor") and s.get("tokens_per_s")]
        if ceilings:
            lines.append("")
            lines.append("The floor's tokens/s over each peer's, how far ahead of that peer accel would be if its "
                         "data parallelism cost nothing: "
                         + "; ".join(ceilings) + ".")
    return "\n".join(lines) + "\n"
