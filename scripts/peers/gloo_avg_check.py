#!/usr/bin/env python3
"""Does Gloo's reduce_scatter_tensor honour ReduceOp.AVG? (pytorch/pytorch#162338, fixed by #171458.)

Two ranks on loopback: rank r contributes [r+1]*4; AVG must give 1.5 everywhere, SUM 3.0. Prints one
JSON line {"torch": ..., "avg_result": [...], "avg_is_sum": bool, "avg_ok": bool} (rank 0) and exits 0;
exit 1 when the collective itself fails. FSDP2 reduces gradients with AVG, so on an affected torch
its gradients on Gloo come out world_size times too large.
"""
import json
import os
import socket
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def worker(rank, port, q):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    inp = torch.full((4,), float(rank + 1))
    out = torch.empty(2)
    dist.reduce_scatter_tensor(out, inp, op=dist.ReduceOp.AVG)
    out_sum = torch.empty(2)
    dist.reduce_scatter_tensor(out_sum, inp.clone(), op=dist.ReduceOp.SUM)
    if rank == 0:
        q.put({"torch": torch.__version__, "avg_result": out.tolist(), "sum_result": out_sum.tolist(),
               "avg_is_sum": bool(torch.equal(out, out_sum)), "avg_ok": bool(torch.allclose(out, torch.full((2,), 1.5)))})
    dist.destroy_process_group()


def main():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    q = ctx.SimpleQueue()
    mp.start_processes(worker, args=(port, q), nprocs=2, start_method="spawn")
    print(json.dumps(q.get()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
