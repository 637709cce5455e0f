"""PyTorch DDP and Accelerate's MULTI_CPU (which is DDP) as bench peers.

Fair settings (../shared/notes/cpu_peers.md section 4): gradient_as_bucket_view=True (gradients are
views of the buckets: no copy, no second gradient buffer), static_graph=True (the GPT's graph is
the same every step and every parameter is used), broadcast_buffers=False (the GPT has no
buffers), bucket_cap_mb = accel's ddp.bucket_cap_mb. Warm-up steps run before timing in the loop.

bf16 (cross-check only): DDP's private _MixedPrecision(param_dtype=bf16, reduce_dtype=bf16) would
keep fp32 parameters and optimizer states, compute in bf16 and all-reduce bf16 gradients (what
accel does for ddp with mixed_precision bf16, docs/design/0008), but it creates an accelerator
stream at construction and so fails on a CPU-only machine with the CUDA wheel; the peer reports
that as its failure.
"""
from __future__ import annotations

import contextlib

import torch
import torch.distributed as dist

from peer_common import Peer, lm_loss, decay_names, make_adamw, ordered_full, set_lr


def ddp_kwargs(spec) -> dict:
    return dict(bucket_cap_mb=spec.ddp_bucket_cap_mb, gradient_as_bucket_view=True, static_graph=True,
                broadcast_buffers=False)


class TorchDDP(Peer):
    def __init__(self, spec, contender, model: torch.nn.Module):
        from torch.nn.parallel import DistributedDataParallel as DDP
        dist.init_process_group("gloo")
        self.spec, self.model = spec, model
        kw = ddp_kwargs(spec)
        if spec.mixed_precision == "bf16":
            from torch.nn.parallel.distributed import _MixedPrecision
            kw["mixed_precision"] = _MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=torch.bfloat16,
                                                    buffer_dtype=torch.bfloat16)
        decay = decay_names(model)
        try:
            self.ddp = DDP(model, **kw)
        except Exception as e:  # torch.AcceleratorError on this wheel without a GPU
            if "mixed_precision" not in kw:
                raise
            raise RuntimeError(
                "PyTorch DDP cannot run bf16 mixed precision on the CPU: its _MixedPrecision creates an "
                "accelerator stream (torch.Stream() in DistributedDataParallel.__init__), which on this CUDA "
                f"wheel without a GPU fails: {type(e).__name__}: {str(e).splitlines()[0]}") from e
        self.opt = make_adamw(model.named_parameters(), decay, spec)
        self.info = {"ddp": {k: (str(v) if k == "mixed_precision" else v) for k, v in kw.items()}}

    def micro(self, x, y, sync, accum):
        ctx = contextlib.nullcontext() if sync else self.ddp.no_sync()
        with ctx:
            loss = lm_loss(self.ddp(x), y)
            (loss / accum).backward()
        return float(loss.detach())

    def step(self, lr):
        params = list(self.model.parameters())
        if self.spec.max_grad_norm > 0:
            norm = torch.nn.utils.clip_grad_norm_(params, self.spec.max_grad_norm)
        else:
            norm = torch.nn.utils.get_total_norm([p.grad for p in params])
        set_lr(self.opt, lr)
        self.opt.step()
        return float(norm)

    def zero_grad(self):
        self.opt.zero_grad(set_to_none=True)

    def full_weights(self):
        return ordered_full(self.model.named_parameters())

    def state_roots(self):
        return [self.model, self.opt]


class AccelerateDDP(Peer):
    """Run under `accelerate launch --config_file <MULTI_CPU yaml>` (one per rank, torchrun's env
    set by the bench): Accelerator reads ACCELERATE_USE_CPU and WORLD_SIZE, picks MULTI_CPU + gloo
    and wraps the model in DDP with the same fair kwargs as the torch DDP contender."""

    def __init__(self, spec, contender, model: torch.nn.Module):
        from accelerate import Accelerator
        from accelerate.utils import DistributedDataParallelKwargs, DistributedType
        if spec.mixed_precision != "no":
            raise RuntimeError("the Accelerate contender runs fp32 only (its bf16 is autocast, not accel's rule)")
        self.spec = spec
        self.acc = Accelerator(kwargs_handlers=[DistributedDataParallelKwargs(**ddp_kwargs(spec))])
        if self.acc.distributed_type != DistributedType.MULTI_CPU or self.acc.num_processes != spec.world:
            raise RuntimeError(f"Accelerate set up {self.acc.distributed_type} with {self.acc.num_processes} "
                               f"process(es), not MULTI_CPU with {spec.world}: was it started by `accelerate "
                               f"launch` with the MULTI_CPU config and torchrun's environment?")
        decay = decay_names(model)
        opt = make_adamw(model.named_parameters(), decay, spec)
        self.ddp, self.opt = self.acc.prepare(model, opt)
        self.model = model
        self.info = {"accelerate": {"distributed_type": str(self.acc.distributed_type),
                                    "num_processes": self.acc.num_processes,
                                    "backend": dist.get_backend(), "ddp": ddp_kwargs(spec),
                                    "wrapped": type(self.ddp).__name__}}

    def micro(self, x, y, sync, accum):
        ctx = contextlib.nullcontext() if sync else self.acc.no_sync(self.ddp)
        with ctx:
            loss = lm_loss(self.ddp(x), y)
            self.acc.backward(loss / accum)
        return float(loss.detach())

    def step(self, lr):
        norm = self.acc.clip_grad_norm_(self.ddp.parameters(), self.spec.max_grad_norm)
        set_lr(self.opt, lr)
        self.opt.step()
        return float(norm)

    def zero_grad(self):
        self.opt.zero_grad(set_to_none=True)

    def full_weights(self):
        return ordered_full(self.model.named_parameters())

    def state_roots(self):
        return [self.model, self.opt]
