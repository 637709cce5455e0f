"""PyTorch FSDP2 (fully_shard) and FSDP1 (FullyShardedDataParallel) as bench peers, on CPU + gloo.

Both shard per transformer Block plus the root (wte, wpe, ln_f), as accel's fsdp backend does with
TRANSFORMER_BASED_WRAP.

FSDP2: an explicit CPU mesh (the default mesh follows the build's accelerator, CUDA on this wheel);
FULL_SHARD is reshard_after_forward=True, SHARD_GRAD_OP is False. FSDP2 reduces with ReduceOp.AVG,
which Gloo's reduce-scatter once ignored (pytorch/pytorch#162338): the peer checks AVG on its own
process group first and, where it is broken, switches every FSDP module to SUM plus a divide
(set_force_sum_reduction_for_comms) and says so in its info. bf16: MixedPrecisionPolicy(param_dtype
=bf16, reduce_dtype=bf16): fp32 sharded parameters and optimizer states, bf16 compute and bf16
gradient reduce-scatter, the reduced shard upcast to fp32; accel's rule (docs/design/0008).

FSDP1: device_id=cpu (without it FSDP1 refuses a CPU-only machine), use_orig_params=True (the
reference's two AdamW groups need per-parameter weight decay; a FlatParameter would mix them),
BACKWARD_PRE and limit_all_gathers (accel's fsdp defaults). bf16: MixedPrecision(param_dtype=bf16,
reduce_dtype=bf16).
"""
from __future__ import annotations

import contextlib
import os

import torch
import torch.distributed as dist

import gpt_model
from peer_common import Peer, lm_loss, decay_names, gloo_reduce_scatter_avg_ok, make_adamw, ordered_full, set_lr


def _total_norm_float(norm) -> float:
    if hasattr(norm, "full_tensor"):
        norm = norm.full_tensor()
    return float(norm)


class FSDP2(Peer):
    def __init__(self, spec, contender, model: torch.nn.Module):
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard
        dist.init_process_group("gloo")
        self.spec = spec
        decay = decay_names(model)
        mesh = init_device_mesh("cpu", (spec.world,))
        mp = MixedPrecisionPolicy()
        if spec.mixed_precision == "bf16":
            mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.bfloat16)
        raf = contender.option == "FULL_SHARD"
        for block in model.h:
            fully_shard(block, mesh=mesh, reshard_after_forward=raf, mp_policy=mp)
        fully_shard(model, mesh=mesh, reshard_after_forward=raf, mp_policy=mp)
        self.model = model
        avg_ok = gloo_reduce_scatter_avg_ok(spec.world)
        simulate_bug = os.environ.get("PEERS_FSDP2_SIMULATE_AVG_BUG") == "1"
        if simulate_bug:
            # What pytorch/pytorch#162338 did on Gloo: the gradients summed, not averaged (world x).
            # For showing its effect (docs/bench/peers_cpu.md) and that the cross-check catches it.
            for m in model.modules():
                if isinstance(m, FSDPModule):
                    m.set_force_sum_reduction_for_comms(True)  # SUM (gloo has no PREMUL_SUM) ...
                    m.set_gradient_divide_factor(1.0)  # ... divided by 1
        elif not avg_ok:
            for m in model.modules():
                if isinstance(m, FSDPModule):
                    m.set_force_sum_reduction_for_comms(True)
        self.opt = make_adamw(model.named_parameters(), decay, spec)
        self.info = {"fsdp2": {"mesh": "cpu", "reshard_after_forward": raf, "units": len(model.h) + 1,
                               "mp_policy": str(mp), "gloo_reduce_scatter_avg_ok": avg_ok,
                               "force_sum_reduction_for_comms": not avg_ok and not simulate_bug,
                               "simulated_avg_bug": simulate_bug}}

    def micro(self, x, y, sync, accum):
        self.model.set_requires_gradient_sync(sync)
        loss = lm_loss(self.model(x), y)
        (loss / accum).backward()
        return float(loss.detach().float())

    def step(self, lr):
        params = list(self.model.parameters())
        if self.spec.max_grad_norm > 0:
            norm = torch.nn.utils.clip_grad_norm_(params, self.spec.max_grad_norm)
        else:
            norm = torch.nn.utils.get_total_norm([p.grad for p in params])
        set_lr(self.opt, lr)
        self.opt.step()
        return _total_norm_float(norm)

    def zero_grad(self):
        self.opt.zero_grad(set_to_none=True)

    def full_weights(self):
        return ordered_full((n, p.full_tensor()) for n, p in self.model.named_parameters())

    def state_roots(self):
        return [self.model, self.opt]


class FSDP1(Peer):
    def __init__(self, spec, contender, model: torch.nn.Module):
        from torch.distributed.fsdp import BackwardPrefetch, MixedPrecision, ShardingStrategy
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
        from torch.distributed.fsdp.wrap import ModuleWrapPolicy
        dist.init_process_group("gloo")
        self.spec = spec
        decay = decay_names(model)
        mp = None
        if spec.mixed_precision == "bf16":
            mp = MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=torch.bfloat16, buffer_dtype=torch.bfloat16)
        strategy = getattr(ShardingStrategy, contender.option)
        self.model = FSDP(model, auto_wrap_policy=ModuleWrapPolicy({gpt_model.Block}), sharding_strategy=strategy,
                          device_id=torch.device("cpu"), use_orig_params=True,
                          backward_prefetch=BackwardPrefetch.BACKWARD_PRE, limit_all_gathers=True,
                          mixed_precision=mp)
        self.fsdp_cls = FSDP
        self.opt = make_adamw(self.model.named_parameters(), decay, spec)
        self.info = {"fsdp1": {"sharding_strategy": contender.option, "device_id": "cpu", "use_orig_params": True,
                               "auto_wrap": "Block", "backward_prefetch": "BACKWARD_PRE", "limit_all_gathers": True,
                               "mixed_precision": str(mp)}}

    def micro(self, x, y, sync, accum):
        ctx = contextlib.nullcontext() if sync else self.model.no_sync()
        with ctx:
            loss = lm_loss(self.model(x), y)
            (loss / accum).backward()
        return float(loss.detach().float())

    def step(self, lr):
        if self.spec.max_grad_norm > 0:
            norm = self.model.clip_grad_norm_(self.spec.max_grad_norm)
        else:
            norm = self.model.clip_grad_norm_(1e30)  # the L2 norm, scaling by 1 (clipping off)
        set_lr(self.opt, lr)
        self.opt.step()
        return float(norm)

    def zero_grad(self):
        self.opt.zero_grad(set_to_none=True)

    def full_weights(self):
        with self.fsdp_cls.summon_full_params(self.model, writeback=False):
            return ordered_full(self.model.named_parameters())

    def state_roots(self):
        return [self.model, self.opt]
