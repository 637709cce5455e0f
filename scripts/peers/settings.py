"""What every contender of the peer bench shares: the run settings, the contenders, the model sizes.

A RunSpec is written once per run as JSON and read by every rank of every contender, so accel's job,
the Python peers and the reference trainer all train the same GPT from the same init file on the
same token file, with the same batch shape, optimizer, schedule and clipping.
"""
from __future__ import annotations

import dataclasses
import json
import math
from typing import Dict, List, Optional


@dataclasses.dataclass
class RunSpec:
    # model (spec GPT; scripts/reference/gpt_model.py)
    n_layer: int = 6
    n_head: int = 6
    n_embd: int = 384
    vocab_size: int = 256
    seq_len: int = 256  # also block_size
    # batch: world W ranks x micro batch B x accumulation G x seq_len tokens per optimizer step
    world: int = 2
    micro_batch: int = 4
    accum: int = 1
    # steps: warmup_steps untimed, then timed_steps timed (loss is recorded for all)
    warmup_steps: int = 3
    timed_steps: int = 10
    # optimizer and schedule (spec/training.md; accel's defaults except lr)
    lr: float = 1e-3
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-8
    sched_warmup: int = 3
    min_lr_ratio: float = 0.1
    max_grad_norm: float = 1.0
    val_fraction: float = 0.1
    # precision: "no" (fp32) or "bf16"
    mixed_precision: str = "no"
    # buckets, in elements (DeepSpeed's unit), the same for accel and every peer
    ddp_bucket_cap_mb: float = 25.0
    reduce_bucket_size: int = 6_553_600  # 25 MiB of fp32
    allgather_bucket_size: int = 6_553_600
    prefetch_bucket_size: int = 50_000_000  # DeepSpeed's and accel's default
    max_live_parameters: int = 1_000_000_000  # DeepSpeed's and accel's default
    threads: int = 1  # OMP_NUM_THREADS and torch.set_num_threads per rank
    # files (filled in by the bench)
    tokens_path: str = ""
    init_path: str = ""
    ds_config_dir: str = ""  # DeepSpeed peers read deepspeed_zero<k>.json from here instead of ds_config.py
    timeout_s: int = 600
    count_comm: bool = True
    save_weights: bool = False  # rank 0 writes weights.safetensors (the cross-check)

    @property
    def steps(self) -> int:
        return self.warmup_steps + self.timed_steps

    @property
    def tokens_per_step(self) -> int:
        return self.world * self.micro_batch * self.accum * self.seq_len

    def num_params(self) -> int:
        C = self.n_embd
        block = 12 * C * C + 13 * C
        return (self.vocab_size + self.seq_len) * C + self.n_layer * block + 2 * C

    def lr_at(self, s: int) -> float:
        """spec/training.md's schedule: linear warmup, then cosine to lr * min_lr_ratio at step `steps`."""
        if s < self.sched_warmup:
            return self.lr * (s + 1) / self.sched_warmup
        lr_min = self.lr * self.min_lr_ratio
        p = (s - self.sched_warmup) / max(1, self.steps - self.sched_warmup)
        return lr_min + 0.5 * (1.0 + math.cos(math.pi * p)) * (self.lr - lr_min)

    def to_json(self) -> Dict[str, object]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, d: Dict[str, object]) -> "RunSpec":
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})

    def dump(self, path: str) -> None:
        with open(path, "w") as f:
            json.dump(self.to_json(), f, indent=1)


# Model sizes of the bench: --quick, the default, and --size large (model states dominate: a short
# sequence, micro batch 1, so parameters, gradients and Adam states outweigh the activations).
SIZES: Dict[str, Dict[str, int]] = {
    "quick": dict(n_layer=2, n_head=4, n_embd=128, seq_len=64, micro_batch=8, warmup_steps=3, timed_steps=20),
    "default": dict(n_layer=6, n_head=6, n_embd=384, seq_len=256, micro_batch=4, warmup_steps=3, timed_steps=10),
    "large": dict(n_layer=12, n_head=8, n_embd=512, seq_len=64, micro_batch=1, warmup_steps=2, timed_steps=6),
}


@dataclasses.dataclass(frozen=True)
class Contender:
    key: str  # for --only / --skip and the JSON
    name: str  # as shown in the table
    family: str  # accel | floor | torch | accelerate | fsdp2 | fsdp1 | deepspeed
    strategy: str  # floor | ddp | zero1 | zero2 | zero3 | full_shard | shard_grad_op: the row group of the table
    option: str = ""  # family-specific: the ZeRO stage, the FSDP strategy, the accel backend


CONTENDERS: List[Contender] = [
    # Not a contender but the bound under every contender: W solo ranks, no communication (floor_runner.py).
    Contender("accel-floor", "no-communication floor", "floor", "floor"),
    Contender("accel-ddp", "accel ddp", "accel", "ddp", "ddp"),
    Contender("torch-ddp", "torch DDP", "torch", "ddp"),
    Contender("accelerate-ddp", "Accelerate DDP", "accelerate", "ddp"),
    Contender("accel-zero1", "accel zero1", "accel", "zero1", "deepspeed:1"),
    Contender("deepspeed-zero1", "DeepSpeed zero1", "deepspeed", "zero1", "1"),
    Contender("accel-zero2", "accel zero2", "accel", "zero2", "deepspeed:2"),
    Contender("deepspeed-zero2", "DeepSpeed zero2", "deepspeed", "zero2", "2"),
    Contender("accel-zero3", "accel zero3", "accel", "zero3", "deepspeed:3"),
    Contender("deepspeed-zero3", "DeepSpeed zero3", "deepspeed", "zero3", "3"),
    Contender("deepspeed-zero3-release", "DeepSpeed zero3, release after use", "deepspeed", "zero3", "3-release"),
    Contender("accel-full_shard", "accel FULL_SHARD", "accel", "full_shard", "fsdp:FULL_SHARD"),
    Contender("fsdp2-full_shard", "FSDP2 fully_shard", "fsdp2", "full_shard", "FULL_SHARD"),
    Contender("fsdp1-full_shard", "FSDP1 FULL_SHARD", "fsdp1", "full_shard", "FULL_SHARD"),
    Contender("accel-shard_grad_op", "accel SHARD_GRAD_OP", "accel", "shard_grad_op", "fsdp:SHARD_GRAD_OP"),
    Contender("fsdp2-shard_grad_op", "FSDP2 reshard_after_forward=False", "fsdp2", "shard_grad_op", "SHARD_GRAD_OP"),
    Contender("fsdp1-shard_grad_op", "FSDP1 SHARD_GRAD_OP", "fsdp1", "shard_grad_op", "SHARD_GRAD_OP"),
]
# accel with its ranks on TCP instead of shared memory (ACCEL_SHM_DISABLE=1, docs/design/0020): the
# transport's before and after in one invocation. Run only when named: by key or as `accel_tcp`.
CONTENDERS += [Contender(f"accel_tcp-{c.strategy}", f"{c.name} over TCP", "accel_tcp", c.strategy, c.option)
               for c in list(CONTENDERS) if c.family == "accel"]
NAMED_ONLY = ("accel_tcp",)

def select(only: Optional[str], skip: Optional[str]) -> List[Contender]:
    keys = {c.key: c for c in CONTENDERS}
    chosen = [c for c in CONTENDERS if c.family not in NAMED_ONLY]
    if only:
        want = [k.strip() for k in only.split(",") if k.strip()]
        bad = [k for k in want if not any(_matches(k, c.key) for c in CONTENDERS)]
        if bad:
            raise ValueError(f"unknown contender(s) {bad}; known: {', '.join(keys)}")
        chosen = [c for c in CONTENDERS if any(_matches(k, c.key) for k in want)
                  and (c.family not in NAMED_ONLY or any(k in (c.key, c.family) for k in want))]
    if skip:
        drop = [k.strip() for k in skip.split(",") if k.strip()]
        chosen = [c for c in chosen if not any(_matches(k, c.key) for k in drop)]
    return chosen


def _matches(pattern: str, key: str) -> bool:
    """An exact key ("deepspeed-zero3"), a family ("deepspeed", "accel") or a strategy ("zero3")."""
    family, strategy = key.split("-", 2)[:2]
    return pattern in (key, family, strategy)
