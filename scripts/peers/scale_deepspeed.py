"""DeepSpeed ZeRO-3 with zero.Init as rows of the scale benchmark (scripts/bench_scale.py).

Variants, each on DeepSpeed's CPU accelerator with gloo, one process per rank (peer_scale_deepspeed.py)
started with torchrun's environment (procs.py):
  ds_zero3       ZeRO-3, no offload; torch.optim.AdamW.
  ds_zero3_cpu   offload_param and offload_optimizer to cpu; DeepSpeedCPUAdam (the JIT-built cpu_adam
                 op), what DeepSpeed builds itself for ZeRO-Offload: a client torch optimizer is refused
                 unless zero_force_ds_cpu_optimizer is false, and DeepSpeed's docs steer CPU users to
                 its CPU Adam.
  ds_zero3_nvme  ZeRO-Infinity: offload_param and offload_optimizer to files under the nvme dir
                 (DeepSpeed's async_io op: libaio, Debian's libaio-dev); DeepSpeedCPUAdam; DeepSpeed's
                 defaults otherwise. Two of them decide the memory:
                 - offload_param.max_in_cpu (1e9 elements) keeps every parameter partition below that
                   size in host memory as well: on these models only the optimizer's state (fp32
                   master, moments, gradients) lives in the files. With max_in_cpu 0 (parameters in
                   the files, as accel's zero3_nvme) DeepSpeed 0.19.8 stopped in the first forward
                   ("Not enough buffers 0 for swapping 1") at 8x512, world 2, with buffer_count 5
                   (buffer_size 1e8) and 16 (1e7), and ran with 32 (1e7).
                 - the swap buffers are locked host memory: 5 x buffer_size (1e8) fp32 for parameters
                   (1.9 GiB a rank, used or not) and 4 for the optimizer, each the size of the
                   largest sub group (sub_group_size 1e9: a whole param group's partition).
                 --ds-set sets these (offload_param.buffer_size=2.5e7, sub_group_size=5e7).
Every variant: stage3_param_persistence_threshold 0 (as accel's rows), DeepSpeed's defaults for
the rest, and the bench's --set deepspeed.<key> values where <key> is the same DeepSpeed key
(CARRIED below); other --set keys have no DeepSpeed counterpart here and are named in a warning.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from typing import Dict, List, Tuple

import procs

VARIANTS = ("ds_zero3", "ds_zero3_cpu", "ds_zero3_nvme")
# accel's deepspeed.<key> -> where the same DeepSpeed key lives in the DeepSpeed JSON.
CARRIED = {
    "reduce_bucket_size": ("zero_optimization",),
    "allgather_bucket_size": ("zero_optimization",),
    "stage3_prefetch_bucket_size": ("zero_optimization",),
    "stage3_param_persistence_threshold": ("zero_optimization",),
    "stage3_max_live_parameters": ("zero_optimization",),
    "overlap_comm": ("zero_optimization",),
    "buffer_count": ("zero_optimization", "offload_param"),
    "pin_memory": ("zero_optimization", "offload_param"),
}
PEER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "peer_scale_deepspeed.py")


def _value(text: str):
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    try:
        number = float(text)
    except ValueError:
        raise ValueError(f"value {text!r}: expected a number (5e7) or true/false") from None
    return int(number) if number.is_integer() else number


def carried_sets(sets: List[str]) -> Tuple[Dict[str, object], List[str]]:
    """The --set KEY=VALUE pairs that carry into DeepSpeed's JSON, and the keys that do not."""
    carried, ignored = {}, []
    for kv in sets:
        key, _, value = kv.partition("=")
        leaf = key[len("deepspeed."):] if key.startswith("deepspeed.") else ""
        if leaf in CARRIED:
            carried[leaf] = _value(value)
        else:
            ignored.append(key)
    return carried, ignored


def apply_ds_sets(zero: Dict[str, object], ds_sets: List[str]) -> None:
    """--ds-set KEY=VALUE: a DeepSpeed-only key under zero_optimization, dotted for nested blocks
    (offload_param.buffer_count=16); the value parsed as a number or a boolean."""
    for kv in ds_sets:
        key, sep, value = kv.partition("=")
        if not sep or not key:
            raise ValueError(f"--ds-set {kv!r}: expected KEY=VALUE under zero_optimization, "
                             f"e.g. offload_param.buffer_count=16")
        *blocks, leaf = key.split(".")
        node = zero
        for b in blocks:
            node = node.setdefault(b, {})
        node[leaf] = _value(value)


def deepspeed_config(variant: str, world: int, nvme_dir: str, carried: Dict[str, object],
                     ds_sets: List[str] = ()) -> dict:
    zero: Dict[str, object] = {"stage": 3, "stage3_param_persistence_threshold": 0}
    if variant == "ds_zero3_cpu":
        zero["offload_param"] = {"device": "cpu"}
        zero["offload_optimizer"] = {"device": "cpu"}
    elif variant == "ds_zero3_nvme":
        zero["offload_param"] = {"device": "nvme", "nvme_path": os.path.join(nvme_dir, "params")}
        zero["offload_optimizer"] = {"device": "nvme", "nvme_path": os.path.join(nvme_dir, "optimizer")}
    for key, value in carried.items():
        where = CARRIED[key]
        if len(where) == 1:
            zero[key] = value
        else:  # an offload knob: accel's one value is for both offloads, as DeepSpeed spells them
            for block in ("offload_param", "offload_optimizer"):
                if block in zero:
                    zero[block][key] = value
    apply_ds_sets(zero, list(ds_sets))
    return {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1, "train_batch_size": world,
            "zero_optimization": zero, "steps_per_print": 1_000_000_000, "wall_clock_breakdown": False}


def prepare_ops(variant: str, env: Dict[str, str]) -> dict:
    """Build the JIT ops the variant loads (cached under ~/.cache/torch_extensions) before any timed
    run, and check that async_io can run here; exit 2 naming the fix when it cannot."""
    ops = []  # ds_zero3: torch's AdamW, no op (the shm comm op is skipped: peer_scale_deepspeed.py)
    if variant != "ds_zero3":
        ops.append("CPUAdamBuilder")
    if variant == "ds_zero3_nvme":
        ops.append("AsyncIOBuilder")
    code = ("import json, sys, time\nfrom deepspeed.accelerator import get_accelerator\nout = {}\n"
            f"for name in {ops!r}:\n"
            "    b = get_accelerator().create_op_builder(name)\n"
            "    if not b.is_compatible(verbose=True):\n"
            "        print(json.dumps({'incompatible': name})); sys.exit(0)\n"
            "    t = time.time(); b.load(verbose=False); out[name] = round(time.time() - t, 1)\n"
            "print(json.dumps(out))")
    p = subprocess.run([sys.executable, "-c", code], env=dict(env, DS_ACCELERATOR="cpu"), capture_output=True, text=True)
    lines = p.stdout.strip().splitlines()
    if p.returncode != 0 or not lines:
        sys.exit(f"bench_scale: building DeepSpeed's ops {ops} for {variant} failed:\n{p.stderr[-3000:]}")
    got = json.loads(lines[-1])
    if "incompatible" in got:
        why = "\n".join(line for line in p.stdout.splitlines() + p.stderr.splitlines() if "WARNING" in line)
        print(f"bench_scale: {variant} cannot run here: DeepSpeed's {got['incompatible']} op is not buildable "
              f"on this machine.\n{why}\nFix: install Debian's libaio-dev (scripts/setup.sh lists it), or leave "
              f"{variant} out of --variants (allowed: {', '.join(VARIANTS)}).", file=sys.stderr)
        sys.exit(2)
    return {"load_s": got}


def run_row(a, variant: str, world: int, n_layer: int, n_embd: int, d: str, params: int) -> dict:
    """One DeepSpeed row in bench_scale's row format; d is the row's scratch directory."""
    carried, ignored = carried_sets(a.set)
    cfg = deepspeed_config(variant, world, os.path.join(a.nvme_dir or d, "nvme"), carried, a.ds_set)
    spec = {"n_layer": n_layer, "n_embd": n_embd, "n_head": max(1, n_embd // 64), "vocab_size": a.vocab_size,
            "seq_len": a.seq_len, "steps": a.steps, "threads": a.threads, "lr": 1.0e-4, "weight_decay": 0.1,
            "optimizer": "torch_adamw" if variant == "ds_zero3" else "ds_cpu_adam", "ds_config": cfg}
    with open(os.path.join(d, "spec.json"), "w") as f:
        json.dump(spec, f, indent=1)
    port = procs.free_port()
    base = dict(os.environ, DS_ACCELERATOR="cpu")
    group = [procs.Proc([sys.executable, PEER, d], procs.rank_env(base, r, world, port, a.threads),
                        os.path.join(d, f"rank_{r}.log")) for r in range(world)]
    res = procs.run_group(group, a.timeout)
    row = {"variant": variant, "world": world, "n_layer": n_layer, "n_embd": n_embd, "before": False,
           "params": params, "wall_s": res.wall_s, "estimate_bytes": 0, "deepspeed_config": cfg,
           "set_not_carried": ignored}
    if not res.ok:
        row["failed"] = res.reason[-2000:]
        return row
    with open(os.path.join(d, "result.json")) as f:
        out = json.load(f)
    ranks = out["ranks"]
    row.update({
        "params": out["params"],
        "setup_peak_rss_bytes": max(r["setup_peak_rss_bytes"] for r in ranks),
        "peak_rss_bytes": max(r["peak_rss_bytes"] for r in ranks),
        "built_peak_rss_bytes": max(r["built_peak_rss_bytes"] for r in ranks),
        "setup_s": max(r["setup_s"] for r in ranks),
        "zero_init_s": max(r["zero_init_s"] for r in ranks),
        "import_s": max(r["import_s"] for r in ranks),
        "training_s": max(sum(r["step_times_s"]) for r in ranks),
        "step_time_s": statistics.median(max(r["step_times_s"][s] for r in ranks) for s in range(a.steps)),
        "final_loss": out["steps"][-1]["loss"],
        "deepspeed": out["deepspeed"], "optimizer": out["optimizer"], "base_optimizer": out["base_optimizer"],
        "param_dtypes": out["param_dtypes"],
    })
    return row
