#!/usr/bin/env python3
"""What a checkpoint costs the training loop, synchronous against asynchronous (training.async_checkpoint,
docs/design/0028). Three runs of one job through `accel launch`: no checkpoint but the final one,
a synchronous checkpoint every --every steps, an asynchronous one every --every steps. From each
run's metrics.jsonl (step_time_s) and report (checkpoint_s.saves: each save_state() on the training
thread) the loop's time over the same steps; the stall a save adds is the difference to the run
without checkpoints, divided by the saves. Prints a table and writes JSON.

    scripts/python scripts/bench_checkpoint_stall.py --json docs/bench/checkpoint_stall_cpu.json

The model is chosen so that a synchronous save takes many steps (a wide GPT, a short batch: the
save grows with the parameters, the step with parameters x tokens), under deepspeed zero_stage 1
(--backend ddp adds its replica check, a pass over the parameters in fp64 and a collective, to every
save, on the training thread in both modes). --threads sets each rank's
OMP_NUM_THREADS: 1 leaves the machine's other cores to the background writer, as a GPU job
leaves its host cores. Figures vary with the disk (a save ends with fsync) and with the machine's
other load; rerun to see the spread. Not a test: it asserts nothing.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def job(out, a, mode):
    every = 0 if mode == "none" else a.every
    j = {
        "backend": a.backend,
        "num_processes": a.world,
        "device": a.device,
        "main_process_port": 0,
        "mixed_precision": a.mixed_precision,
        "model": {"name": "gpt", "n_layer": a.layers, "n_head": a.heads, "n_embd": a.width, "vocab_size": 256,
                  "block_size": a.seq},
        "data": {"kind": "synthetic"},
        "optimizer": {"name": "adamw", "lr": 1e-4, "fused": a.fused == "true" if a.fused in ("true", "false") else a.fused},
        "scheduler": {"name": "constant", "warmup_steps": 0},
        "training": {"max_steps": a.steps, "micro_batch_size": a.micro, "seq_len": a.seq, "output_dir": out,
                     "eval_every": 0, "log_every": a.steps, "max_grad_norm": a.max_grad_norm, "checkpoint_every": every, "save_weights": False,
                     "async_checkpoint": mode == "async", "resume": "never"},
    }
    if a.backend == "deepspeed":
        j["deepspeed"] = {"zero_stage": 1}
    return j


def write_yaml(path, value):
    def emit(v, indent):
        pad = " " * indent
        for k, x in v.items():
            if isinstance(x, dict):
                yield f"{pad}{k}:"
                yield from emit(x, indent + 2)
            else:
                yield f"{pad}{k}: {json.dumps(x)}"
    with open(path, "w") as f:
        f.write("\n".join(emit(value, 0)) + "\n")


def run_mode(a, tmp, mode):
    out = os.path.join(tmp, mode)
    path = os.path.join(tmp, mode + ".yaml")
    write_yaml(path, job(out, a, mode))
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
    t0 = time.time()
    p = subprocess.run([a.accel, "launch", path], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    if p.returncode != 0:
        sys.exit(f"{mode} run failed (exit {p.returncode}):\n{p.stdout[-4000:]}")
    with open(os.path.join(out, "metrics.jsonl")) as f:
        steps = [json.loads(line)["step_time_s"] for line in f if line.strip()]
    with open(os.path.join(out, "report", "rank_0.json")) as f:
        saves = json.load(f)["checkpoint_s"]
    ckpt = os.path.join(out, "checkpoints", f"step_{a.steps:08d}")
    size = sum(os.path.getsize(os.path.join(ckpt, n)) for n in os.listdir(ckpt))
    return {"wall_s": time.time() - t0, "step_time_s": steps, "saves_s": saves["saves"],
            "final_wait_s": saves["final_wait"], "async_times": saves.get("async_times", {}),
            "checkpoint_bytes": size}


def summarize(a, runs):
    """Per periodic save k (after step k * every): the stall it adds is its save_state() call plus
    how much longer the `every` steps after it took than the same steps of the run without
    checkpoints (an asynchronous save's copy, the next optimizer step's wait for it, a background
    writer taking cores or memory bandwidth from the steps). The final save is the run's end, not a
    stall, and is reported apart."""
    none = runs["none"]["step_time_s"]
    step = statistics.median(none[1:])
    rows = []
    for mode in ("sync", "async"):
        r = runs[mode]
        times, periodic = r["step_time_s"], r["saves_s"][:-1]
        stalls = []
        for k, call in enumerate(periodic, start=1):
            window = range(k * a.every, min((k + 1) * a.every, a.steps))
            stalls.append(call + sum(times[i] - none[i] for i in window))
        # The training thread's own waits per save: its save_state() call, and (asynchronous) the
        # optimizer steps' waits for the staging copy until the next save. What the background
        # thread took, wall and CPU, per save.
        at = r["async_times"]
        fences = (at.get("fence_waits") or [0.0] * len(r["saves_s"]))[:len(periodic)]
        blocked = [call + fence for call, fence in zip(periodic, fences)]
        bg_saves = max(1, at.get("saves", 0))
        rows.append({"mode": mode, "median_step_s": statistics.median(times[1:]), "saves": len(periodic),
                     "blocked_s": blocked, "fence_wait_s": fences,
                     "background_per_save_s": at.get("background", 0.0) / bg_saves,
                     "background_cpu_per_save_s": at.get("background_cpu", 0.0) / bg_saves,
                     "save_call_s": periodic, "stall_s": stalls, "mean_stall_s": statistics.mean(stalls),
                     "median_stall_s": statistics.median(stalls), "mean_stall_steps": statistics.mean(stalls) / step,
                     "median_stall_steps": statistics.median(stalls) / step,
                     "final_save_s": r["saves_s"][-1] + r["final_wait_s"]})
    return step, rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--accel", default=os.environ.get("ACCEL_BINARY") or os.path.join(ROOT, "build", "accel"))
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--backend", default="deepspeed", help="deepspeed (zero_stage 1) or ddp")
    ap.add_argument("--world", type=int, default=1)
    ap.add_argument("--mixed-precision", default="no")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--seq", type=int, default=16)
    ap.add_argument("--micro", type=int, default=1)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--every", type=int, default=13)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--fused", default="true", help="optimizer.fused (true: torch's fused AdamW, a shorter step)")
    ap.add_argument("--max-grad-norm", type=float, default=0.0, help="training.max_grad_norm (0: no clipping pass)")
    ap.add_argument("--dir", help="where the runs go (default: a temporary directory, removed)")
    ap.add_argument("--json", help="write the figures here")
    a = ap.parse_args()
    if a.steps % a.every == 0:
        sys.exit("--steps must not be a multiple of --every: the last periodic save must not be the final one")

    with tempfile.TemporaryDirectory(prefix="accel_ckpt_stall_", dir=a.dir) as tmp:
        runs = {mode: run_mode(a, tmp, mode) for mode in ("none", "sync", "async")}
    step, rows = summarize(a, runs)
    size = runs["sync"]["checkpoint_bytes"]
    print(f"GPT {a.layers} x {a.width}, {a.backend if a.backend != 'deepspeed' else 'deepspeed zero_stage 1'} at world {a.world} on {a.device}, {a.micro} x {a.seq} tokens a "
          f"step, {a.threads} thread(s) a rank; a checkpoint of {size / 2**20:.0f} MiB every {a.every} steps, "
          f"{a.steps} steps")
    print(f"one step without checkpoints: {step * 1e3:.1f} ms (median)\n")
    print("| checkpoints | median step | training thread blocked by a save: first; later (mean) | background thread "
          "a save: wall, CPU | loop time a save adds: first; later (mean) |")
    print("|---|---|---|---|---|")
    print(f"| none (the final one only) | {step * 1e3:.0f} ms | | | |")

    def pct(seconds):
        return f"{seconds:.2f} s ({seconds / step * 100:.0f}%)" if abs(seconds) >= 0.1 else \
            f"{seconds * 1e3:.0f} ms ({seconds / step * 100:.1f}%)"
    for r in rows:
        later_blocked = statistics.mean(r["blocked_s"][1:] or r["blocked_s"])
        later_stall = statistics.mean(r["stall_s"][1:] or r["stall_s"])
        bg = f"{r['background_per_save_s']:.2f} s, {r['background_cpu_per_save_s']:.2f} s" if r["mode"] == "async" else ""
        print(f"| {r['mode']} | {r['median_step_s'] * 1e3:.0f} ms | {pct(r['blocked_s'][0])}; {pct(later_blocked)} | {bg} | "
              f"{pct(r['stall_s'][0])}; {pct(later_stall)} |")
    print("(percentages: of one step without checkpoints)")
    sync = next(r for r in rows if r["mode"] == "sync")
    asyn = next(r for r in rows if r["mode"] == "async")
    later = asyn["blocked_s"][1:] or asyn["blocked_s"]
    print(f"\na synchronous save blocks training for {statistics.mean(sync['blocked_s']) / step:.1f} steps; an "
          f"asynchronous one for {statistics.mean(later) / step * 100:.1f}% of a step once its staging buffers exist "
          f"({asyn['blocked_s'][0] / step * 100:.1f}% the first time), and its background thread takes "
          f"{asyn['background_cpu_per_save_s']:.2f} s of CPU a save")
    result = {"config": vars(a), "checkpoint_bytes": size, "step_s": step, "rows": rows, "runs": runs}
    if a.json:
        os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
        with open(a.json, "w") as f:
            json.dump(result, f, indent=2)
        print(f"wrote {a.json}")


if __name__ == "__main__":
    main()
