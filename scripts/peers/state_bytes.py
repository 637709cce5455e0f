"""Model-state bytes a Python peer holds on this rank, from the tensors it actually keeps.

A peer's model states are whatever tensor storage stays reachable from its model and its optimizer
(or engine) between steps: parameters (full or sharded), gradients (or gradient shards and
buckets), fp32 master copies and the optimizer's moments. held_bytes() walks those objects
(attributes, lists, dicts, a tensor's .grad and its own attributes, a DTensor's local tensor) and
sums the current size of every distinct storage, each counted once however many views share it:
a DDP gradient that is a view of its bucket counts the bucket, a FlatParameter's freed full buffer
(storage resized to 0) counts 0, a ZeRO-3 parameter released after use counts only its shard.
Activations are not model states and are gone between steps; so are the transient gathers of
FSDP/ZeRO-3, which this figure therefore leaves out (accel's run report shows its transient peak
separately).
"""
from __future__ import annotations

from typing import Dict, Iterable, Tuple

import torch

_SKIP_TYPES = (str, bytes, int, float, bool, type(None), type)
# Objects of these modules are walked into; anything else (process groups, loggers, streams,
# configs of other libraries) is not.
_WALK_MODULE_PREFIXES = ("torch", "deepspeed", "accelerate", "gpt_model", "__main__", "peer_")


def _storage_key(t: torch.Tensor) -> Tuple[int, int]:
    s = t.untyped_storage()
    return s.data_ptr(), s.nbytes()


def held_bytes(roots: Iterable[object], max_depth: int = 8) -> Dict[str, int]:
    """{"bytes": distinct storage bytes reachable from `roots`, "tensors": how many tensors were seen}."""
    seen_obj = set()
    storages: Dict[int, int] = {}
    n_tensors = 0

    def visit_tensor(t: torch.Tensor, depth: int) -> None:
        nonlocal n_tensors
        if id(t) in seen_obj:
            return
        seen_obj.add(id(t))
        local = getattr(t, "_local_tensor", None)  # DTensor: the shard this rank holds
        if isinstance(local, torch.Tensor):
            visit_tensor(local, depth)
        else:
            try:
                ptr, nbytes = _storage_key(t)
                if ptr or nbytes:
                    storages[ptr] = max(storages.get(ptr, 0), nbytes)
                n_tensors += 1
            except (RuntimeError, NotImplementedError):  # meta or exotic tensors hold nothing
                pass
        g = t.grad if t.requires_grad or t.is_leaf else None
        if isinstance(g, torch.Tensor):
            visit_tensor(g, depth)
        d = getattr(t, "__dict__", None)  # FlatParameter's buffers, ZeRO-3's ds_tensor, ...
        if d:
            visit(d, depth + 1)

    def visit(o: object, depth: int) -> None:
        if depth > max_depth or isinstance(o, _SKIP_TYPES):
            return
        if isinstance(o, torch.Tensor):
            visit_tensor(o, depth)
            return
        if id(o) in seen_obj:
            return
        seen_obj.add(id(o))
        if isinstance(o, dict):
            for k, v in list(o.items()):
                if isinstance(k, torch.Tensor):
                    visit(k, depth + 1)
                visit(v, depth + 1)
        elif isinstance(o, (list, tuple, set, frozenset)):
            for v in list(o):
                visit(v, depth + 1)
        elif isinstance(o, torch.nn.Module):
            visit(o.__dict__, depth + 1)  # _parameters, _buffers, _modules and attributes
        else:
            mod = type(o).__module__ or ""
            if mod.startswith(_WALK_MODULE_PREFIXES) and hasattr(o, "__dict__"):
                visit(o.__dict__, depth + 1)

    for r in roots:
        visit(r, 0)
    return {"bytes": int(sum(storages.values())), "tensors": n_tensors}
