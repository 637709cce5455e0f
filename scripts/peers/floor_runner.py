"""The no-communication floor: what accel's step costs on this machine with nothing to
communicate. No framework's step goes below it without faster compute than accel's (both run the
same libtorch kernels).

W independent single-rank accel runs (ddp at world 1: no collective does any work) are started at
once, each with one rank's batch (micro batch x accumulation x seq_len) and the spec's threads per
process. They share the cores, caches and memory bandwidth as W ranks do, and each computes what
one rank of a contender computes: the same forward, backward, clipping and AdamW. A synchronous
data-parallel step waits for its slowest rank, so the floor's step time is the slowest of the W
runs at each step. A contender's step minus this floor is what its framework adds: collectives,
copies into and out of buffers, waits, and its own overhead.

The floor's losses are those of world 1 (rank 0's windows only), so they are not compared with the
contenders'.
"""
from __future__ import annotations

import os
from typing import Dict, Tuple

import accel_runner
import procs


def run(spec, run_dir: str, accel: str, env_base: Dict[str, str]) -> Tuple[procs.GroupResult, Dict]:
    env = accel_runner.launch_env(spec, env_base)
    group, dirs = [], []
    for r in range(spec.world):
        rdir = os.path.join(run_dir, f"solo{r}")
        os.makedirs(rdir, exist_ok=True)
        job = accel_runner.native_job(spec, "ddp", rdir)
        job["num_processes"] = 1
        path = os.path.join(rdir, "job.yaml")
        with open(path, "w") as f:
            f.write(accel_runner.to_yaml(job) + "\n")
        group.append(procs.Proc([accel, "launch", path], env, os.path.join(rdir, "launcher.log"), cwd=rdir))
        dirs.append(rdir)
    with open(os.path.join(run_dir, "command.txt"), "w") as f:
        f.write("\n".join(" ".join(p.cmd) for p in group) + "\n  (started at once)\n")
    res = procs.run_group(group, timeout_s=spec.timeout_s, grace_s=15.0)
    if not res.ok:
        return res, {}
    solo_spec = type(spec).from_json(dict(spec.to_json(), world=1))
    solos = [accel_runner.read_results(solo_spec, d) for d in dirs]
    records = []
    for steps in zip(*(s["records"] for s in solos)):
        rec = dict(steps[0])
        rec["step_time_s"] = max(x["step_time_s"] for x in steps)  # the slowest rank sets a synchronous step
        rec["tokens"] = sum(x["tokens"] for x in steps)
        records.append(rec)
    ranks = [dict(s["ranks"][0], rank=r) for r, s in enumerate(solos)]
    return res, {"records": records, "ranks": ranks}
