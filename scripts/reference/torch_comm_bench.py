"""Peer benchmark for `accel bench comm`: the same collectives through torch.distributed with Gloo
(torch 2.11 from accel's Python environment), float32, the same sizes and the same timing rule (the
slowest rank's mean per op after warm-up). torch 2.11's Gloo reduce_scatter is an all-reduce per
output under the hood, so its bus bandwidth (counted as a true reduce-scatter's) comes out low; a
backend without the op is reported as unsupported.

usage: scripts/python scripts/reference/torch_comm_bench.py [--world 2] [--max-bytes N] [--iters 10] [--json FILE]
"""
import argparse
import json
import os
import socket
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

BUS_FACTOR = {"all_reduce": lambda n: 2 * (n - 1) / n, "reduce_scatter": lambda n: (n - 1) / n,
              "all_gather": lambda n: (n - 1) / n, "broadcast": lambda n: 1.0}


def run_op(name, full, shards, world):
    if name == "all_reduce":
        dist.all_reduce(full)
    elif name == "reduce_scatter":
        dist.reduce_scatter(shards[0], list(full.chunk(world)))
    elif name == "all_gather":
        dist.all_gather(shards, shards[0])
    else:
        dist.broadcast(full, 0)


def rank_main(rank, args, port, queue):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=args.world)
    results = []
    for name in ["all_reduce", "reduce_scatter", "all_gather", "broadcast"]:
        size = args.min_bytes
        while size <= args.max_bytes:
            numel = max(args.world, size // 4 // args.world * args.world)
            full = torch.ones(numel)
            shards = [torch.ones(numel // args.world) for _ in range(args.world)]
            try:
                for _ in range(args.warmup):
                    run_op(name, full, shards, args.world)
                dist.barrier()
                t0 = time.perf_counter()
                for _ in range(args.iters):
                    run_op(name, full, shards, args.world)
                us = torch.tensor([(time.perf_counter() - t0) / args.iters * 1e6], dtype=torch.float64)
                dist.all_reduce(us, op=dist.ReduceOp.MAX)
                us = us.item()
                algbw = numel * 4 / (us * 1e-6) / 1e9
                results.append({"collective": name, "size_bytes": numel * 4, "time_us": us, "algbw_gbps": algbw,
                                "busbw_gbps": algbw * BUS_FACTOR[name](args.world)})
            except RuntimeError as e:
                results.append({"collective": name, "size_bytes": numel * 4, "unsupported": str(e).splitlines()[0]})
                break
            size *= args.step
    if rank == 0:
        queue.put(results)
    dist.barrier()
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--world", type=int, default=2)
    parser.add_argument("--min-bytes", type=int, default=1024)
    parser.add_argument("--max-bytes", type=int, default=16 << 20)
    parser.add_argument("--step", type=int, default=4)
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    queue = mp.get_context("spawn").SimpleQueue()
    mp.spawn(rank_main, args=(args, port, queue), nprocs=args.world, join=True)
    results = queue.get()
    print(f"torch.distributed gloo, {args.world} ranks, float32, {args.iters} iterations (+{args.warmup} warm-up)")
    print(f"{'collective':>15} {'size (B)':>12} {'time (us)':>12} {'algbw (GB/s)':>13} {'busbw (GB/s)':>13}")
    for r in results:
        if "unsupported" in r:
            print(f"{r['collective']:>15} unsupported: {r['unsupported']}")
        else:
            print(f"{r['collective']:>15} {r['size_bytes']:12d} {r['time_us']:12.1f} {r['algbw_gbps']:13.3f} "
                  f"{r['busbw_gbps']:13.3f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"world_size": args.world, "results": results}, f, indent=2)


if __name__ == "__main__":
    main()
