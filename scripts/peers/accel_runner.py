"""accel's contenders: the job (native YAML, or an Accelerate config file plus --set), the launch, and
the figures read back from the run directory.

Native (the default): a job YAML with the spec's model, data, optimizer, schedule, batch and the
backend block (ddp.bucket_cap_mb; deepspeed zero_stage and the ZeRO bucket keys of ds_config.py;
fsdp sharding_strategy with BACKWARD_PRE and limit_all_gathers, one unit per Block).

Accelerate files (--accel-config accelerate): `accel launch accelerate_configs/<file>.yaml --set ...`
with the file unchanged. An Accelerate config carries the distributed setup (distributed_type,
num_processes, mixed_precision, fsdp_config, deepspeed_config with a DeepSpeed JSON holding the ZeRO
keys); what it cannot carry (the model, the data, the optimizer, the schedule, the batch shape, the
output directory, init_from) is given with --set, which overrides every file layer.

Figures: per-step loss, grad norm, lr and step time from metrics.jsonl; peak RSS, model-state bytes
and bytes moved per step from report/rank_<r>.json (the backend's own tensors and the
communicator's counters).
"""
from __future__ import annotations

import json
import os
from typing import Dict, List, Tuple

import procs

HERE = os.path.dirname(os.path.abspath(__file__))
ACCELERATE_CONFIGS = os.path.join(HERE, "accelerate_configs")

# contender.option -> the Accelerate config file that describes the same distributed setup
ACCELERATE_FILE = {
    "ddp": "multi_cpu.yaml",
    "deepspeed:1": "deepspeed_zero1.yaml",
    "deepspeed:2": "deepspeed_zero2.yaml",
    "deepspeed:3": "deepspeed_zero3.yaml",
    "fsdp:FULL_SHARD": "fsdp_full_shard.yaml",
    "fsdp:SHARD_GRAD_OP": "fsdp_shard_grad_op.yaml",
}

# Model-state components of the run report (engine/sharded/sharded_engine.cpp, ddp_backend.cpp):
# held between steps, and the transient peaks of gathered parameters and full gradients.
HELD = ("params", "param_shards", "grads", "grad_shard", "master", "optimizer_states")
TRANSIENT = ("live_params_peak", "live_grads_peak")


def _scalar(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    return json.dumps(str(v))  # a JSON string is a YAML scalar ("no" stays a string)


def to_yaml(d: Dict[str, object], indent: int = 0) -> str:
    out = []
    for k, v in d.items():
        if isinstance(v, dict):
            out.append(" " * indent + f"{k}:")
            out.append(to_yaml(v, indent + 2))
        elif isinstance(v, (list, tuple)):
            out.append(" " * indent + f"{k}: [" + ", ".join(_scalar(x) for x in v) + "]")
        else:
            out.append(" " * indent + f"{k}: {_scalar(v)}")
    return "\n".join(out)


def common_sections(spec, run_dir: str) -> Dict[str, object]:
    """Everything but the distributed setup: what an Accelerate file cannot carry."""
    return {
        "model": {"name": "gpt", "n_layer": spec.n_layer, "n_head": spec.n_head, "n_embd": spec.n_embd,
                  "vocab_size": spec.vocab_size, "block_size": spec.seq_len},
        "data": {"kind": "tokens", "path": spec.tokens_path, "val_fraction": spec.val_fraction},
        "optimizer": {"name": "adamw", "lr": spec.lr, "weight_decay": spec.weight_decay,
                      "betas": [spec.beta1, spec.beta2], "eps": spec.eps},
        "scheduler": {"name": "cosine", "warmup_steps": spec.sched_warmup, "min_lr_ratio": spec.min_lr_ratio},
        "training": {"max_steps": spec.steps, "micro_batch_size": spec.micro_batch,
                     "gradient_accumulation_steps": spec.accum, "seq_len": spec.seq_len,
                     "max_grad_norm": spec.max_grad_norm, "output_dir": os.path.join(run_dir, "run"),
                     "resume": "never", "save_weights": bool(spec.save_weights), "log_every": 1000,
                     "eval_every": 0, "checkpoint_every": 0, "init_from": spec.init_path},
    }


def backend_block(spec, option: str) -> Dict[str, object]:
    backend, _, value = option.partition(":")
    if backend == "ddp":
        return {"backend": "ddp", "ddp": {"bucket_cap_mb": spec.ddp_bucket_cap_mb}}
    if backend == "deepspeed":
        stage = int(value)
        ds: Dict[str, object] = {"zero_stage": stage, "reduce_bucket_size": spec.reduce_bucket_size}
        if stage == 3:
            ds.update(stage3_param_persistence_threshold=0, stage3_prefetch_bucket_size=spec.prefetch_bucket_size,
                      stage3_max_live_parameters=spec.max_live_parameters)
        return {"backend": "deepspeed", "deepspeed": ds}
    if backend == "fsdp":
        return {"backend": "fsdp", "fsdp": {"sharding_strategy": value, "backward_prefetch": "BACKWARD_PRE",
                                            "limit_all_gathers": True, "auto_wrap_policy": "TRANSFORMER_BASED_WRAP"}}
    raise ValueError(f"unknown accel option {option!r}")


def native_job(spec, option: str, run_dir: str) -> Dict[str, object]:
    job: Dict[str, object] = {"num_processes": spec.world, "device": "cpu", "main_process_port": 0,
                              "mixed_precision": spec.mixed_precision, "rendezvous_timeout_s": 120,
                              "collective_timeout_s": spec.timeout_s}
    job.update(backend_block(spec, option))
    job.update(common_sections(spec, run_dir))
    return job


def flatten(d: Dict[str, object], prefix: str = "") -> List[Tuple[str, object]]:
    out = []
    for k, v in d.items():
        if isinstance(v, dict):
            out += flatten(v, f"{prefix}{k}.")
        else:
            out.append((prefix + k, v))
    return out


def set_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(set_value(x) for x in v) + "]"
    return str(v)


def command(spec, contender, run_dir: str, accel: str, config_mode: str) -> List[str]:
    """The `accel launch` command line for this contender (writes the job file when native)."""
    if config_mode == "native":
        path = os.path.join(run_dir, "job.yaml")
        with open(path, "w") as f:
            f.write(to_yaml(native_job(spec, contender.option, run_dir)) + "\n")
        return [accel, "launch", path]
    if config_mode != "accelerate":
        raise ValueError(f"config mode {config_mode!r}: expected native or accelerate")
    path = os.path.join(ACCELERATE_CONFIGS, ACCELERATE_FILE[contender.option])
    sets = flatten(common_sections(spec, run_dir))
    sets += [("mixed_precision", spec.mixed_precision), ("main_process_port", 0),
             ("rendezvous_timeout_s", 120), ("collective_timeout_s", spec.timeout_s)]
    cmd = [accel, "launch", path]
    for k, v in sets:
        cmd += ["--set", f"{k}={set_value(v)}"]
    return cmd


def read_results(spec, run_dir: str) -> Dict[str, object]:
    out_dir = os.path.join(run_dir, "run")
    with open(os.path.join(out_dir, "metrics.jsonl")) as f:
        metrics = [json.loads(line) for line in f if line.strip()]
    ranks = []
    for r in range(spec.world):
        with open(os.path.join(out_dir, "report", f"rank_{r}.json")) as f:
            rep = json.load(f)
        mem = rep.get("memory", {})
        ranks.append({"rank": r, "peak_rss_bytes": rep.get("peak_rss_bytes"),
                      "model_state_bytes": sum(int(mem.get(k, 0)) for k in HELD),
                      "transient_bytes": sum(int(mem.get(k, 0)) for k in TRANSIENT),
                      "memory": mem, "comm_per_step": rep.get("comm_per_step")})
    records = [{"step": m["step"], "loss": m["loss"], "lr": m["lr"], "grad_norm": m["grad_norm"],
                "step_time_s": m["step_time_s"], "tokens": m["tokens"]} for m in metrics]
    return {"records": records, "ranks": ranks}


def launch_env(spec, env_base: Dict[str, str]) -> Dict[str, str]:
    """The environment of `accel launch`: the spec's threads, and no ACCEL_* (it would override the job)."""
    env = {k: v for k, v in env_base.items() if not k.startswith("ACCEL_")}
    env.update(OMP_NUM_THREADS=str(spec.threads), PYTHONDONTWRITEBYTECODE="1")
    return env


def run(spec, contender, run_dir: str, accel: str, config_mode: str, env_base: Dict[str, str]) -> Tuple[procs.GroupResult, Dict]:
    cmd = command(spec, contender, run_dir, accel, config_mode)
    env = launch_env(spec, env_base)
    if contender.family == "accel_tcp":
        env["ACCEL_SHM_DISABLE"] = "1"  # the ranks' collectives over TCP, not shared memory (design 0020)
    with open(os.path.join(run_dir, "command.txt"), "w") as f:
        f.write(" ".join(cmd) + "\n")
    res = procs.run_group([procs.Proc(cmd, env, os.path.join(run_dir, "launcher.log"), cwd=run_dir)],
                          timeout_s=spec.timeout_s, grace_s=15.0)
    if not res.ok:
        return res, {}
    return res, read_results(spec, run_dir)
