"""Peer benchmark for `accel bench launch`: start W Python ranks with torch.distributed's env://
variables (Debian's torchrun does not run on Python 3.11), and time from the start until every rank
is ready to train (init_process_group("gloo") done and a barrier passed).

usage: scripts/python scripts/reference/torch_launch_bench.py [--world 4] [--json FILE]
"""
import argparse
import json
import os
import socket
import subprocess
import sys
import time

RANK_CODE = r"""
import os, sys, time
import torch.distributed as dist
dist.init_process_group("gloo", init_method="env://")
dist.barrier()
print(time.time_ns(), flush=True)
dist.barrier()
dist.destroy_process_group()
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--world", type=int, default=4)
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    port = free_port()
    start = time.time_ns()
    procs = []
    for rank in range(args.world):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                   WORLD_SIZE=str(args.world), LOCAL_RANK=str(rank), OMP_NUM_THREADS="1")
        procs.append(subprocess.Popen([sys.executable, "-c", RANK_CODE], env=env, stdout=subprocess.PIPE, text=True))
    ready = []
    for p in procs:
        out, _ = p.communicate(timeout=300)
        if p.returncode != 0:
            sys.exit(f"a rank failed with exit code {p.returncode}")
        ready.append((int(out.strip().splitlines()[-1]) - start) / 1e6)
    print(f"torch.distributed (gloo, env://): {args.world} ranks ready {max(ready):.1f} ms after start "
          f"(first ready at {min(ready):.1f} ms)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"world_size": args.world, "slowest_ready_ms": max(ready), "fastest_ready_ms": min(ready),
                       "per_rank_ready_ms": ready}, f, indent=2)


if __name__ == "__main__":
    main()
