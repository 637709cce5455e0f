#!/usr/bin/env python3
"""Benchmark on one GPU: GPT-2 124M in bf16, accel's strategies beside PyTorch
FSDP2 (fully_shard) and plain PyTorch eager, on the same model, batch and machine, in one run.

Model: the spec GPT (scripts/reference/gpt_model.py: pre-LN blocks, tanh GELU, tied embedding) at
n_layer 12, n_head 12, n_embd 768, vocab 50304, sequence 1024. Every contender computes in bf16
with fp32 master weights and AdamW, and uses libtorch's fused attention
(scaled_dot_product_attention, causal):
  - accel ddp, deepspeed zero 1-3 and fsdp FULL_SHARD at world 1 (`accel launch`, mixed_precision
    bf16, data.kind synthetic); tokens/s from metrics.jsonl, peak memory from its peak_mem_bytes
    (the caching allocator's peak allocated bytes); AdamW is accel's GPU default, the fused
    kernel (optimizer.fused auto), and accel-zero3-elementwise runs zero 3 with the elementwise
    kernels to show what fusing buys;
  - torch eager: fp32 parameters, torch.autocast(bf16), torch.optim.AdamW (foreach, torch's default);
  - FSDP2: fully_shard on every Block and the root, MixedPrecisionPolicy(param_dtype=bf16,
    reduce_dtype=bf16), over a world of one (NCCL), AdamW as above.
The peers train on random tokens of the same shape (throughput does not depend on the values).
Each contender runs in its own process (a fresh CUDA context and memory statistics), in turn over
--repeat rounds; the figure is the median step time over the steps after --warmup in every round.

MFU = tokens/s x FLOPs per token / the GPU's dense bf16 peak, FLOPs per token = 6 N + 12 L C T
(N: parameters without the position table, as nanoGPT's estimate; 12 L C T: the attention
scores and their use, forward and backward, counted whole). The peak comes from the device name
(H100 SXM / H200: 989.4 TFLOPS) or --peak-tflops.

  scripts/python scripts/bench_gpu.py --json out.json --markdown out.md
  scripts/python scripts/bench_gpu.py --only accel-zero3,fsdp2 --steps 20 --micro 8
  scripts/python scripts/bench_gpu.py --dry-run     # no GPU: accel's rows on the CPU, a tiny model
It asserts nothing; run it on an otherwise idle GPU.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(HERE, "reference"))
sys.path.insert(0, os.path.join(HERE, "peers"))
import accel_runner  # noqa: E402  (its to_yaml writes accel's job files)

ACCEL_STRATEGIES = {
    "accel-ddp": {"backend": "ddp"},
    "accel-zero1": {"backend": "deepspeed", "deepspeed": {"zero_stage": 1}},
    "accel-zero2": {"backend": "deepspeed", "deepspeed": {"zero_stage": 2}},
    "accel-zero3": {"backend": "deepspeed", "deepspeed": {"zero_stage": 3, "stage3_param_persistence_threshold": 0}},
    "accel-full_shard": {"backend": "fsdp", "fsdp": {"sharding_strategy": "FULL_SHARD"}},
    # accel's GPU default is the fused AdamW kernel; this row measures what it buys.
    "accel-zero3-elementwise": {"backend": "deepspeed", "deepspeed": {"zero_stage": 3, "stage3_param_persistence_threshold": 0},
                                "optimizer": {"fused": False}},
}
PEERS = ("torch-eager", "fsdp2")
# Dense bf16 tensor-core peaks (no sparsity), by a substring of torch.cuda.get_device_name().
PEAK_TFLOPS = (("H200", 989.4), ("H100 PCIe", 756.0), ("H100", 989.4), ("A100", 312.0), ("L40S", 362.05))


def flops_per_token(a) -> float:
    n = 12 * a.n_layer * a.n_embd ** 2 + 13 * a.n_layer * a.n_embd + a.vocab * a.n_embd + 2 * a.n_embd
    return 6 * n + 12 * a.n_layer * a.n_embd * a.seq


def run_bounded(cmd, timeout, merge_stderr=False):
    """subprocess.run in a session of its own: past `timeout` seconds (0: none) the whole process group
    (accel's launcher and its workers) is killed and the result says so (returncode -9)."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE,
                         text=True, start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout or None)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        err = f"over its {timeout:g} s timeout\n" + (out if merge_stderr else err or "")
        return subprocess.CompletedProcess(cmd, -9, err if merge_stderr else out, err)
    return subprocess.CompletedProcess(cmd, p.returncode, out, err)


def write_accel_job(name, a, workdir):
    """accel's job file for contender `name`; returns its path and output directory."""
    out = os.path.join(workdir, name)
    job = {"device": "cpu" if a.dry_run else "cuda", "num_processes": 1, "main_process_port": 0, "mixed_precision": "bf16",
           "model": {"name": "gpt", "n_layer": a.n_layer, "n_head": a.n_head, "n_embd": a.n_embd,
                     "vocab_size": a.vocab, "block_size": a.seq},
           "data": {"kind": "synthetic"},
           "optimizer": {"name": "adamw", "lr": 6e-4, "weight_decay": 0.1, "betas": [0.9, 0.95], "eps": 1e-8},
           "scheduler": {"name": "cosine", "warmup_steps": 2, "min_lr_ratio": 0.1},
           "training": {"max_steps": a.steps, "micro_batch_size": a.micro, "gradient_accumulation_steps": 1,
                        "seq_len": a.seq, "max_grad_norm": 1.0, "output_dir": out, "eval_every": 0,
                        "checkpoint_every": 0, "log_every": 1, "resume": "never", "save_weights": False}}
    for k, v in ACCEL_STRATEGIES[name].items():
        job[k] = {**job[k], **v} if isinstance(v, dict) and isinstance(job.get(k), dict) else v
    path = os.path.join(workdir, name + ".yaml")
    with open(path, "w") as f:
        f.write(accel_runner.to_yaml(job) + "\n")
    return path, out


def run_accel(name, a, workdir):
    path, out = write_accel_job(name, a, workdir)
    estimate = estimate_step_peak(a, path, workdir, name)
    p = run_bounded([a.accel, "launch", path], a.timeout, merge_stderr=True)
    if p.returncode != 0:
        return {"error": f"exit {p.returncode}: {p.stdout[-2000:]}"}
    with open(os.path.join(out, "metrics.jsonl")) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    timed = rows[a.warmup:]
    return {"step_times_s": [r["step_time_s"] for r in timed], "peak_bytes": max(r["peak_mem_bytes"] for r in rows),
            "loss_first": rows[0]["loss"], "loss_last": rows[-1]["loss"], "estimate": estimate}


def estimate_step_peak(a, path, workdir, name):
    """`accel estimate-memory` on the job about to run: its configured row's step peak and components,
    the model's parameter count and the world, to set beside the caching allocator's measured peak
    (scripts/bench_gpu_memory.py uses it too)."""
    out = os.path.join(workdir, name + "-estimate.json")
    p = run_bounded([a.accel, "estimate-memory", path, "--json", out], 60, merge_stderr=True)
    if p.returncode != 0:
        return {"error": f"exit {p.returncode}: {p.stdout[-500:]}"}
    with open(out) as f:
        est = json.load(f)
    rows = [r for r in est["strategies"] if r.get("configured")]
    if not rows:
        return {"error": "estimate-memory marked no row as the job's"}
    return {"row": rows[0]["name"], "peak_phase": rows[0].get("peak_phase"), "bytes": rows[0]["bytes"],
            "parameters": est["model"]["parameters"], "world": est["world"]}


def reestimate(a, path):
    """The estimates of an earlier run's accel rows, recomputed for its own arguments (the estimate
    is a function of the job file alone): an estimator change is compared without a GPU."""
    with open(path) as f:
        doc = json.load(f)
    for key in ("n_layer", "n_head", "n_embd", "vocab", "seq", "micro", "steps", "dry_run"):
        setattr(a, key, doc["args"][key])
    with tempfile.TemporaryDirectory(prefix="accel_bench_gpu_reestimate_") as workdir:
        for r in doc["results"]:
            if r["contender"] in ACCEL_STRATEGIES and "error" not in r:
                job, _ = write_accel_job(r["contender"], a, workdir)
                r["estimate"] = estimate_step_peak(a, job, workdir, r["contender"])
                b = r["estimate"]["bytes"]
                print(f"{r['contender']}: measured {r['peak_gib']:.2f} GiB, estimate {b['peak'] / 2 ** 30:.2f} GiB, "
                      f"measured / estimate {r['peak_gib'] * 2 ** 30 / b['peak']:.3f}")
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
    return 0


def use_fused_attention(gpt_model):
    """The spec GPT's attention through torch's scaled_dot_product_attention (causal), as accel's."""
    import torch.nn.functional as F

    def sdpa_forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))

    gpt_model.CausalSelfAttention.forward = sdpa_forward


def worker(kind, a):
    """One peer in this process: prints its figures as one JSON line."""
    import torch
    import gpt_model

    use_fused_attention(gpt_model)
    torch.manual_seed(1337)
    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    model = gpt_model.build_model(a.n_layer, a.n_head, a.n_embd, a.vocab, a.seq, seed=1337).to(dev)
    if kind == "fsdp2":
        import torch.distributed as dist
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
        dist.init_process_group("nccl", rank=0, world_size=1, device_id=dev)
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.bfloat16)
        for block in model.h:
            fully_shard(block, mp_policy=mp)
        fully_shard(model, mp_policy=mp)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=6e-4, betas=(0.9, 0.95), eps=1e-8)
    g = torch.Generator(device="cpu").manual_seed(1)
    times, losses = [], []
    for step in range(a.steps):
        x = torch.randint(0, a.vocab, (a.micro, a.seq), generator=g).to(dev, non_blocking=True)
        y = torch.randint(0, a.vocab, (a.micro, a.seq), generator=g).to(dev, non_blocking=True)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        if kind == "fsdp2":
            _, loss = model(x, y)
        else:
            with torch.autocast("cuda", dtype=torch.bfloat16):
                _, loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    print(json.dumps({"step_times_s": times[a.warmup:], "peak_bytes": torch.cuda.max_memory_allocated(dev),
                      "loss_first": losses[0], "loss_last": losses[-1]}))
    if kind == "fsdp2":
        torch.distributed.destroy_process_group()


def run_peer(kind, a):
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", kind] + [
        f"--{k}={v}" for k, v in (("n-layer", a.n_layer), ("n-head", a.n_head), ("n-embd", a.n_embd),
                                  ("vocab", a.vocab), ("seq", a.seq), ("micro", a.micro), ("steps", a.steps),
                                  ("warmup", a.warmup))]
    p = run_bounded(cmd, a.timeout)
    if p.returncode != 0:
        return {"error": f"exit {p.returncode}: {p.stderr[-2000:]}"}
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--worker", choices=PEERS, help=argparse.SUPPRESS)
    ap.add_argument("--n-layer", type=int, default=12)
    ap.add_argument("--n-head", type=int, default=12)
    ap.add_argument("--n-embd", type=int, default=768)
    ap.add_argument("--vocab", type=int, default=50304)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--micro", type=int, default=16, help="rows per step (16 x 1024 tokens)")
    ap.add_argument("--steps", type=int, default=25)
    ap.add_argument("--warmup", type=int, default=5, help="steps left out of the timing")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--only", default="", help="comma-separated contenders (default: all)")
    ap.add_argument("--timeout", type=float, default=0.0, help="seconds each contender's run may take (0: no limit)")
    ap.add_argument("--peak-tflops", type=float, default=0.0)
    ap.add_argument("--accel", default=os.path.join(ROOT, "build", "accel"))
    ap.add_argument("--json", default="")
    ap.add_argument("--markdown", default="")
    ap.add_argument("--dry-run", action="store_true",
                    help="accel's rows on the CPU with a tiny model: checks the script and its job files before a lease")
    ap.add_argument("--reestimate", default="", metavar="JSON",
                    help="recompute the estimates of an earlier run's JSON with this accel (rewrites the file)")
    a = ap.parse_args()
    if a.reestimate:
        return reestimate(a, a.reestimate)
    if a.worker:
        worker(a.worker, a)
        return 0
    if a.dry_run:
        a.n_layer, a.n_head, a.n_embd, a.vocab, a.seq, a.micro, a.steps, a.warmup = 2, 2, 64, 256, 64, 2, 6, 2
        gpu, peak = "the CPU (dry run, figures meaningless)", 0.0
    else:
        import torch
        if not torch.cuda.is_available():
            print("bench_gpu: no CUDA GPU visible", file=sys.stderr)
            return 77
        gpu = torch.cuda.get_device_name(0)
        peak = a.peak_tflops or next((t for key, t in PEAK_TFLOPS if key in gpu), 0.0)
    names = list(ACCEL_STRATEGIES) + ([] if a.dry_run else list(PEERS))
    if a.only:
        names = [n for n in names if n in a.only.split(",")]
    fpt = flops_per_token(a)
    runs = {n: [] for n in names}
    with tempfile.TemporaryDirectory(prefix="accel_bench_gpu_") as workdir:
        for _ in range(a.repeat):
            for n in names:
                r = run_accel(n, a, workdir) if n in ACCEL_STRATEGIES else run_peer(n, a)
                print(f"{n}: {r.get('error') or 'median step %.1f ms' % (1e3 * statistics.median(r['step_times_s']))}",
                      flush=True)
                runs[n].append(r)
    tokens_per_step = a.micro * a.seq
    results = []
    for n in names:
        ok = [r for r in runs[n] if "error" not in r]
        if not ok:
            results.append({"contender": n, "error": runs[n][-1]["error"]})
            continue
        step = statistics.median([t for r in ok for t in r["step_times_s"]])
        tps = tokens_per_step / step
        results.append({"contender": n, "tokens_per_s": tps, "step_ms": 1e3 * step,
                        "mfu": tps * fpt / (peak * 1e12) if peak else None,
                        "peak_gib": max(r["peak_bytes"] for r in ok) / 2 ** 30,
                        "loss_first": ok[-1]["loss_first"], "loss_last": ok[-1]["loss_last"]})
        if ok[-1].get("estimate"):
            results[-1]["estimate"] = ok[-1]["estimate"]
    by = {r["contender"]: r for r in results if "error" not in r}
    lines = [f"GPT-2 124M (L{a.n_layer} H{a.n_head} C{a.n_embd} V{a.vocab} T{a.seq}), bf16, micro batch "
             f"{a.micro}, world 1 on {gpu} (peak {peak} TFLOPS bf16), {a.steps} steps ({a.warmup} warm-up) x "
             f"{a.repeat}", "",
             "| contender | tokens/s | step (ms) | MFU | peak memory (GiB) | vs FSDP2 | vs eager |",
             "|---|---|---|---|---|---|---|"]
    for r in results:
        if "error" in r:
            lines.append(f"| {r['contender']} | error | | | | | |")
            continue
        rel = lambda peer: f"{r['tokens_per_s'] / by[peer]['tokens_per_s']:.2f}x" if peer in by else "-"
        mfu = f"{100 * r['mfu']:.1f}%" if r["mfu"] is not None else "-"
        lines.append(f"| {r['contender']} | {r['tokens_per_s']:,.0f} | {r['step_ms']:.1f} | {mfu} | "
                     f"{r['peak_gib']:.2f} | {rel('fsdp2')} | {rel('torch-eager')} |")
    table = "\n".join(lines)
    print("\n" + table)
    for r in results:
        if "error" in r:
            print(f"\n{r['contender']}: {r['error']}", file=sys.stderr)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"gpu": gpu, "peak_tflops": peak, "flops_per_token": fpt, "args": vars(a), "results": results,
                       "runs": runs}, f, indent=1)
    if a.markdown:
        with open(a.markdown, "w") as f:
            f.write(table + "\n")
    return 0 if all("error" not in r for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
