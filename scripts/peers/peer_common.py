"""What every Python peer does the same way: the reference's AdamW groups, the gloo check, names.

Every peer trains through the same small interface (Peer), so the training loop in peer_worker.py
is one piece of code for all of them: micro(x, y, sync) runs one micro-step's forward and
backward and returns the micro loss; step(lr) clips, sets the lr and steps the optimizer and
returns the pre-clip global gradient norm; full_weights() gathers the full parameters under the
spec names (a collective: every rank calls it); state_roots() names the objects whose tensors are
this rank's model states (state_bytes.py).
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Dict, Iterable, List, Set, Tuple

import torch
import torch.distributed as dist

# FSDP1 and checkpoint wrappers insert these into parameter names.
_WRAPPER_PARTS = ("_fsdp_wrapped_module.", "_checkpoint_wrapped_module.", "_orig_mod.", "module.")


def clean_name(name: str) -> str:
    for part in _WRAPPER_PARTS:
        name = name.replace(part, "")
    return name


def decay_names(model: torch.nn.Module) -> Set[str]:
    """The reference's decay group (reference_train.make_optimizer): every parameter with dim >= 2.
    Taken from the unwrapped model: FSDP1 with use_orig_params flattens its shards to 1-D."""
    return {n for n, p in model.named_parameters() if p.dim() >= 2}


def make_adamw(named_params: Iterable[Tuple[str, torch.nn.Parameter]], decay: Set[str], spec) -> torch.optim.AdamW:
    """torch.optim.AdamW with the reference's two groups: weight decay on `decay`, none on the rest."""
    named = [(clean_name(n), p) for n, p in named_params]
    unknown = [n for n, _ in named if n not in decay and not _is_no_decay(n)]
    if unknown:
        raise RuntimeError(f"parameter names not in the spec after unwrapping: {unknown[:5]}")
    groups = [{"params": [p for n, p in named if n in decay], "weight_decay": spec.weight_decay},
              {"params": [p for n, p in named if n not in decay], "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=spec.lr, betas=(spec.beta1, spec.beta2), eps=spec.eps,
                             weight_decay=spec.weight_decay)


def _is_no_decay(name: str) -> bool:
    return name.endswith(".bias") or ".ln_" in name or name.startswith("ln_")


def lm_loss(out, y: torch.Tensor) -> torch.Tensor:
    """Mean token cross-entropy of the model's logits, computed in fp32 whatever the compute dtype:
    what accel's trainer does (token_cross_entropy, trainer/models/builtin_ops.cpp, upcasts the
    logits). In fp32 this is exactly the loss GPT.forward computes; in bf16 it keeps the loss and its
    gradient out of bf16 rounding (a bf16 loss near 5 has an ulp of 0.03)."""
    logits = out[0] if isinstance(out, tuple) else out
    return torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.size(-1)), y.reshape(-1))


def set_lr(optimizer, lr: float) -> None:
    for g in optimizer.param_groups:
        g["lr"] = lr


def gloo_reduce_scatter_avg_ok(world: int) -> bool:
    """pytorch/pytorch#162338: Gloo's reduce_scatter ignored ReduceOp.AVG (summed). FSDP2 asks for
    AVG, so on an affected torch its gradients are world x too large. Checked on the real group."""
    rank = dist.get_rank()
    inp = torch.full((2 * world,), float(rank + 1))
    out = torch.empty(2)
    dist.reduce_scatter_tensor(out, inp, op=dist.ReduceOp.AVG)
    expected = sum(range(1, world + 1)) / world
    return bool(torch.allclose(out, torch.full((2,), expected)))


def ordered_full(named: Iterable[Tuple[str, torch.Tensor]]) -> "OrderedDict[str, torch.Tensor]":
    """Full fp32 weights under the spec names (spec order comes from gpt_model.param_names)."""
    return OrderedDict((clean_name(n), t.detach().to(torch.float32).clone()) for n, t in named)


class Peer:
    """The interface the training loop drives (see the module docstring)."""

    info: Dict[str, object]

    def micro(self, x: torch.Tensor, y: torch.Tensor, sync: bool, accum: int) -> float:
        raise NotImplementedError

    def step(self, lr: float) -> float:
        raise NotImplementedError

    def zero_grad(self) -> None:
        pass

    def full_weights(self) -> "OrderedDict[str, torch.Tensor]":
        raise NotImplementedError

    def state_roots(self) -> List[object]:
        raise NotImplementedError
