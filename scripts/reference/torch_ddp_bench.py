#!/usr/bin/env python3
"""Peer benchmark: PyTorch DDP (Gloo, CPU) training the reference GPT, to compare accel's throughput with.

torch.multiprocessing.spawn starts --world processes that rendezvous on 127.0.0.1 at a free port.
Each rank uses OMP_NUM_THREADS = torch.set_num_threads = --threads (default: cores // world), builds
the same GPT as reference_train.py (gpt_model.py, seeded spec init), wraps it in
DistributedDataParallel(bucket_cap_mb), and trains with the reference AdamW groups, grad clipping
and grad accumulation (no_sync on all but the last micro-step). After --warmup-steps untimed steps,
--steps steps are timed between two barriers.

tokens/s = world * accum * micro_batch * seq_len * steps / elapsed wall time (rank 0's clock).
Data: sequential windows of --tokens FILE (the spec's order), or synthetic uniform random tokens.

Example (the quickstart shape, what docs/benchmarks.md reports):
  scripts/python scripts/reference/torch_ddp_bench.py --world 2 --steps 20 --json /tmp/ddp.json
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import socket
import statistics
import sys
import time

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker(rank: int, a: argparse.Namespace, port: int) -> None:
    sys.path.insert(0, HERE)
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    import gpt_model
    import token_data
    from reference_train import make_optimizer

    import datetime
    import faulthandler
    faulthandler.dump_traceback_later(a.timeout, exit=True)  # a hung rank shows where it hung, then exits
    torch.set_num_threads(a.threads)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=a.world,
                            timeout=datetime.timedelta(seconds=a.timeout))
    W, B, G, T = a.world, a.micro_batch, a.accum, a.seq_len
    model = gpt_model.build_model(a.n_layer, a.n_head, a.n_embd, a.vocab_size, a.block_size, seed=a.seed)
    n_params = sum(p.numel() for p in model.parameters())
    ddp = DDP(model, bucket_cap_mb=a.bucket_cap_mb)
    opt = make_optimizer(model, a.lr, 0.1, (0.9, 0.95), 1e-8)

    data = None
    if a.tokens:
        data = token_data.TokenWindows(token_data.read_tokens(a.tokens), T, 0.0)
    gen = torch.Generator().manual_seed(a.seed * 1000 + rank)

    def batch(s: int, m: int):
        if data is not None:
            return data.train_batch(s, m, rank, W, B, G)
        toks = torch.randint(0, a.vocab_size, (B, T + 1), generator=gen)
        return toks[:, :-1].contiguous(), toks[:, 1:].contiguous()

    def step(s: int) -> float:
        opt.zero_grad(set_to_none=True)
        total = 0.0
        for m in range(G):
            x, y = batch(s, m)
            if m < G - 1:
                with ddp.no_sync():
                    _, loss = ddp(x, y)
                    (loss / G).backward()
            else:
                _, loss = ddp(x, y)
                (loss / G).backward()
            total += float(loss.detach()) / G
        if a.max_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), a.max_grad_norm)
        opt.step()
        return total

    for s in range(a.warmup_steps):
        step(s)
    dist.barrier()
    times, losses = [], []
    t_start = time.perf_counter()
    for s in range(a.warmup_steps, a.warmup_steps + a.steps):
        t0 = time.perf_counter()
        losses.append(step(s))
        times.append(time.perf_counter() - t0)
    dist.barrier()
    elapsed = time.perf_counter() - t_start
    rss = torch.tensor([resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024], dtype=torch.float64)
    dist.all_reduce(rss, op=dist.ReduceOp.MAX)
    if rank == 0:
        tokens_step = W * G * B * T
        res = {
            "bench": "torch_ddp_gloo_cpu",
            "tokens_per_s": tokens_step * a.steps / elapsed,
            "step_time_s": elapsed / a.steps,
            "step_time_s_median": statistics.median(times),
            "step_time_s_min": min(times),
            "elapsed_s": elapsed,
            "tokens_per_step": tokens_step,
            "steps": a.steps, "warmup_steps": a.warmup_steps,
            "world": W, "micro_batch": B, "accum": G, "seq_len": T,
            "threads_per_rank": a.threads, "cpu_count": os.cpu_count(),
            "model": {"n_layer": a.n_layer, "n_head": a.n_head, "n_embd": a.n_embd,
                      "vocab_size": a.vocab_size, "block_size": a.block_size, "params": n_params},
            "data": a.tokens or "synthetic-uniform",
            "bucket_cap_mb": a.bucket_cap_mb, "max_grad_norm": a.max_grad_norm,
            "first_loss": losses[0] if losses else None, "last_loss": losses[-1] if losses else None,
            "peak_rss_bytes_max_over_ranks": int(rss.item()),
            "torch": torch.__version__, "python": platform.python_version(),
            "blas": _blas_info(torch),
        }
        print(f"torch DDP gloo: world {W}, {a.threads} thread(s)/rank, {tokens_step} tokens/step, "
              f"{a.steps} timed steps after {a.warmup_steps} warm-up: "
              f"{res['tokens_per_s']:.0f} tokens/s, {res['step_time_s'] * 1000:.1f} ms/step "
              f"(median {res['step_time_s_median'] * 1000:.1f} ms)")
        if a.json:
            with open(a.json, "w") as f:
                json.dump(res, f, indent=1)
    # Every rank leaves together: rank 0 hosts the store, and a rank still talking to a peer that has
    # exited can spin in Gloo instead of failing.
    dist.barrier()
    dist.destroy_process_group()
    faulthandler.cancel_dump_traceback_later()


def _blas_info(torch) -> str:
    """Which BLAS shared library this process actually mapped (Debian switches it with alternatives;
    the reference libblas is far slower than OpenBLAS)."""
    torch.ones(2, 2) @ torch.ones(2, 2)  # make sure the BLAS is loaded
    libs = set()
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split()[-1]
                if "blas" in os.path.basename(path).lower():
                    libs.add(os.path.realpath(path))
    except OSError:  # pragma: no cover
        pass
    return ", ".join(sorted(libs)) or "unknown"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="PyTorch DDP (Gloo, CPU) throughput on the reference GPT.")
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--threads", type=int, default=None, help="threads per rank (default cores // world, >= 1)")
    p.add_argument("--n-layer", dest="n_layer", type=int, default=2)
    p.add_argument("--n-head", dest="n_head", type=int, default=4)
    p.add_argument("--n-embd", dest="n_embd", type=int, default=128)
    p.add_argument("--vocab-size", dest="vocab_size", type=int, default=256)
    p.add_argument("--block-size", dest="block_size", type=int, default=64)
    p.add_argument("--seq-len", dest="seq_len", type=int, default=64)
    p.add_argument("--micro-batch", dest="micro_batch", type=int, default=8)
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--steps", type=int, default=20, help="timed steps (20)")
    p.add_argument("--warmup-steps", dest="warmup_steps", type=int, default=3, help="untimed steps first (3)")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--max-grad-norm", dest="max_grad_norm", type=float, default=1.0)
    p.add_argument("--bucket-cap-mb", dest="bucket_cap_mb", type=float, default=25.0)
    p.add_argument("--tokens", help="llm.c token file (default: synthetic uniform tokens)")
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--port", type=int, default=0, help="rendezvous port (0: a free one)")
    p.add_argument("--json", help="write the result here")
    p.add_argument("--timeout", type=int, default=300, help="seconds before a hung run is killed (300)")
    a = p.parse_args(argv)
    if a.threads is None:
        a.threads = max(1, (os.cpu_count() or 1) // a.world)
    if a.seq_len > a.block_size:
        p.error("--seq-len exceeds --block-size")
    os.environ["OMP_NUM_THREADS"] = str(a.threads)  # inherited by the spawned ranks
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    import torch.multiprocessing as mp
    port = a.port or free_port()
    ctx = mp.spawn(worker, args=(a, port), nprocs=a.world, join=False)
    deadline = time.monotonic() + a.timeout + 30
    while not ctx.join(timeout=1):  # raises if a rank fails
        if time.monotonic() > deadline:
            for proc in ctx.processes:
                if proc.is_alive():
                    proc.kill()
            print(f"torch_ddp_bench: error: ranks still running after {a.timeout + 30} s, killed", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
