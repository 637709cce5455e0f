"""The DeepSpeed JSON of a bench run: one dict, used by the DeepSpeed peer and (as a file named by an
Accelerate config) by accel, so both sides run with the same ZeRO settings.

Settings that matter for fairness (../shared/notes/cpu_peers.md section 1.4):
- stage3_param_persistence_threshold 0: every parameter is partitioned (DeepSpeed's default 1e5
  would keep every LayerNorm and bias, and in a small model most blocks, replicated);
- reduce_bucket_size, allgather_bucket_size, stage3_prefetch_bucket_size and
  stage3_max_live_parameters: the bench's values, the same in accel's job;
- gradient_clipping = max_grad_norm (DeepSpeed clips in its optimizer wrapper; see report.py for
  its rule next to torch's);
- no "optimizer" and no "scheduler" block: the DeepSpeed peer passes a torch.optim.AdamW with the
  reference's two parameter groups and writes the spec lr into its groups before every step.
"""
from __future__ import annotations

from typing import Dict


def deepspeed_config(spec, stage: int, release: bool = False) -> Dict[str, object]:
    zero: Dict[str, object] = {
        "stage": stage,
        "reduce_bucket_size": spec.reduce_bucket_size,
        "allgather_bucket_size": spec.allgather_bucket_size,
        "contiguous_gradients": True,
        "reduce_scatter": True,
    }
    if stage == 3:
        zero.update(stage3_param_persistence_threshold=0, stage3_prefetch_bucket_size=spec.prefetch_bucket_size,
                    stage3_max_live_parameters=spec.max_live_parameters)
        if release:
            # DeepSpeed keeps a gathered parameter for its next use when (a) that use comes within
            # stage3_max_reuse_distance elements (default 1e9), or (b) its prefetcher, scanning the
            # recorded trace stage3_prefetch_bucket_size elements ahead, met the parameter already
            # gathered. With any prefetch, (b) keeps every Block gathered from its forward to its
            # backward on these models: DeepSpeed then gathers the model once per step, not twice.
            # Both at 0 make it release after each module's forward and gather again in backward,
            # as accel's stage 3 and FSDP's FULL_SHARD do (accel has neither rule; the accel job
            # keeps the shared values). Measured: the "release after use" row.
            zero.update(stage3_prefetch_bucket_size=0, stage3_max_reuse_distance=0)
    cfg: Dict[str, object] = {
        "train_micro_batch_size_per_gpu": spec.micro_batch,
        "gradient_accumulation_steps": spec.accum,
        "train_batch_size": spec.micro_batch * spec.accum * spec.world,
        "gradient_clipping": spec.max_grad_norm,
        "zero_optimization": zero,
        "bf16": {"enabled": spec.mixed_precision == "bf16"},
        "steps_per_print": 1_000_000_000,
        "wall_clock_breakdown": False,
    }
    return cfg


def from_file(path: str, spec, stage: int, release: bool = False) -> Dict[str, object]:
    """A DeepSpeed JSON as Accelerate passes it on (accelerate_configs/deepspeed_zero<k>.json), with
    its "auto" values filled in from the run as Accelerate would: the batch shape and bf16."""
    import json
    with open(path) as f:
        cfg = json.load(f)
    auto = {"train_micro_batch_size_per_gpu": spec.micro_batch, "gradient_accumulation_steps": spec.accum,
            "train_batch_size": spec.micro_batch * spec.accum * spec.world}
    for k, v in auto.items():
        if cfg.get(k) == "auto":
            cfg[k] = v
    for block, on in (("bf16", spec.mixed_precision == "bf16"), ("fp16", False)):
        if isinstance(cfg.get(block), dict) and cfg[block].get("enabled") == "auto":
            cfg[block]["enabled"] = on
    got = cfg.get("zero_optimization", {}).get("stage")
    if got != stage:
        raise ValueError(f"{path}: zero_optimization.stage is {got}, the contender runs stage {stage}")
    if cfg.get("gradient_clipping") != spec.max_grad_norm:
        raise ValueError(f"{path}: gradient_clipping {cfg.get('gradient_clipping')} but the run clips at "
                         f"{spec.max_grad_norm}")
    cfg.setdefault("steps_per_print", 1_000_000_000)
    if release:
        cfg["zero_optimization"].update(stage3_prefetch_bucket_size=0, stage3_max_reuse_distance=0)
    return cfg
