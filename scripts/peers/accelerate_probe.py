#!/usr/bin/env python3
"""What Accelerate itself does with the config files of accelerate_configs/ on this (CPU) machine.

For each file: `accelerate launch --config_file FILE accelerate_probe.py --probe` (Accelerate's own
launcher, no torchrun variables set by us), whose ranks build an Accelerator, prepare a Linear
model and an AdamW, and print what they got: the distributed type, the number of processes, the
wrapper class, or the error. Prints one line per rank and file, and a JSON summary with --json.

  scripts/python scripts/peers/accelerate_probe.py [--json PATH]
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIGS = os.path.join(HERE, "accelerate_configs")
FILES = ("multi_cpu.yaml", "fsdp_full_shard.yaml", "fsdp_shard_grad_op.yaml", "deepspeed_zero1.yaml",
         "deepspeed_zero2.yaml", "deepspeed_zero3.yaml")


def probe() -> None:
    import torch
    out = {"rank": os.environ.get("RANK")}
    try:
        from accelerate import Accelerator
        acc = Accelerator()
        out.update(distributed_type=str(acc.distributed_type), num_processes=acc.num_processes,
                   process_index=acc.process_index)
        model, opt = acc.prepare(torch.nn.Linear(4, 4), torch.optim.AdamW(torch.nn.Linear(4, 4).parameters()))
        out["wrapped"] = type(model).__name__
    except Exception as e:  # the point is to report what Accelerate raises
        out["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"
    print("PROBE " + json.dumps(out), flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--probe", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--json")
    ap.add_argument("--timeout", type=int, default=240)
    a = ap.parse_args()
    if a.probe:
        probe()
        return 0
    exe = os.path.join(os.path.dirname(sys.executable), "accelerate")
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    env.update(OMP_NUM_THREADS="1", DS_ACCELERATOR="cpu", PYTHONDONTWRITEBYTECODE="1")
    results = {}
    for name in FILES:
        cmd = [exe, "launch", "--config_file", os.path.join(CONFIGS, name), os.path.abspath(__file__), "--probe"]
        # cwd: Accelerate resolves deepspeed_config_file against the working directory (accel: the YAML's folder)
        p = subprocess.Popen(cmd, env=env, cwd=CONFIGS, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             start_new_session=True)
        try:
            out, _ = p.communicate(timeout=a.timeout)
            lines = [json.loads(line[6:]) for line in out.splitlines() if line.startswith("PROBE ")]
            results[name] = {"exit_code": p.returncode, "ranks": sorted(lines, key=lambda r: str(r.get("rank")))}
        except subprocess.TimeoutExpired:
            results[name] = {"exit_code": None, "ranks": [], "error": f"timed out after {a.timeout} s"}
        finally:
            try:
                os.killpg(p.pid, signal.SIGKILL)  # torchrun's ranks too
            except ProcessLookupError:
                pass
            p.wait()
        for r in results[name]["ranks"] or [{"error": results[name].get("error", "no rank reported")}]:
            print(f"{name}: rank {r.get('rank')}: " + (r.get("error") or
                  f"{r['distributed_type']}, {r['num_processes']} processes, model wrapped in {r.get('wrapped')}"))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
