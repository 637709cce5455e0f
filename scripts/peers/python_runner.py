"""Running one Python peer: world processes of peer_worker.py with torchrun's environment.

Every rank gets MASTER_ADDR=127.0.0.1, a free MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_SIZE
(DeepSpeed's CPU accelerator counts devices from it), OMP_NUM_THREADS, GLOO_SOCKET_IFNAME=lo and
DS_ACCELERATOR=cpu. The Accelerate contender's ranks are each `accelerate launch --config_file
accelerate_configs/multi_cpu.yaml --main_process_port P peer_worker.py RUN_DIR`: Accelerate's own
launcher, driven by its MULTI_CPU config file, which starts the worker with ACCELERATE_USE_CPU.
"""
from __future__ import annotations

import json
import os
import sys
from typing import Dict, Tuple

import procs

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "peer_worker.py")


def accelerate_exe() -> str:
    exe = os.path.join(os.path.dirname(sys.executable), "accelerate")
    if not os.path.exists(exe):
        raise FileNotFoundError(f"{exe}: no `accelerate` next to {sys.executable} (is accelerate installed?)")
    return exe


def run(spec, contender, run_dir: str, env_base: Dict[str, str], ds_skip_shm: bool = False
        ) -> Tuple[procs.GroupResult, Dict]:
    j = spec.to_json()
    j["contender"] = contender.key
    with open(os.path.join(run_dir, "spec.json"), "w") as f:
        json.dump(j, f, indent=1)
    port = procs.free_port()
    base = {k: v for k, v in env_base.items() if not k.startswith("ACCEL_")}
    base["DS_ACCELERATOR"] = "cpu"
    if ds_skip_shm:
        base["PEERS_DS_SKIP_SHM"] = "1"
    group = []
    for r in range(spec.world):
        env = procs.rank_env(base, r, spec.world, port, spec.threads)
        if contender.family == "accelerate":
            cfg = os.path.join(HERE, "accelerate_configs", "multi_cpu.yaml")
            cmd = [accelerate_exe(), "launch", "--config_file", cfg, "--main_process_port", str(port), WORKER, run_dir]
        else:
            cmd = [sys.executable, WORKER, run_dir]
        group.append(procs.Proc(cmd, env, os.path.join(run_dir, f"rank_{r}.log")))
    with open(os.path.join(run_dir, "command.txt"), "w") as f:
        f.write(" ".join(group[0].cmd) + "\n")
    res = procs.run_group(group, timeout_s=spec.timeout_s)
    if not res.ok:
        return res, {}
    with open(os.path.join(run_dir, "result.json")) as f:
        return res, json.load(f)
