"""Counting the bytes a Python peer sends through torch.distributed, with accel's conventions.

install() wraps the collectives in torch.distributed (and the same names in distributed_c10d),
before DeepSpeed or FSDP bind them, so every call through the Python API is counted: payload
bytes as accel's CommStats defines them (all_reduce/broadcast/reduce: the tensor; reduce_scatter:
the full input; all_gather: the full output) and bus bytes with nccl-tests' factors (all_reduce
2(n-1)/n, reduce_scatter and all_gather (n-1)/n, broadcast 1), exactly what accel's run report
gives as comm_per_step.bus_bytes.

What this cannot see: collectives issued from C++ (PyTorch DDP's reducer, whose bucket all-reduces
never pass through Python) and functional collectives (DTensor's, e.g. FSDP2's grad-norm
all-reduce of one scalar). For DDP the bench states the all-reduced gradient bytes instead
(every gradient once per step, fixed by DDP's contract) and marks the figure as derived.
Note: Gloo implements reduce_scatter as a full all-reduce plus a copy (ProcessGroupGloo), so what
actually crosses the loopback for a peer's reduce-scatter is about twice its bus bytes; the
convention counts the logical collective, as accel's counters do.
"""
from __future__ import annotations

import functools
import os
from typing import Dict

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

# torch.distributed name -> (kind, which argument holds the sized tensor(s))
_OPS = {
    "all_reduce": "all_reduce",
    "all_reduce_coalesced": "all_reduce",
    "reduce": "reduce",
    "broadcast": "broadcast",
    "reduce_scatter_tensor": "reduce_scatter",
    "_reduce_scatter_base": "reduce_scatter",
    "reduce_scatter": "reduce_scatter",
    "all_gather_into_tensor": "all_gather",
    "_all_gather_base": "all_gather",
    "all_gather": "all_gather",
    "all_gather_coalesced": "all_gather",
}


class Counter:
    def __init__(self) -> None:
        self.enabled = False
        self.calls: Dict[str, int] = {}
        self.payload: Dict[str, int] = {}

    def reset(self) -> None:
        self.calls.clear()
        self.payload.clear()

    def add(self, kind: str, nbytes: int) -> None:
        if not self.enabled:
            return
        if _TRACE:  # PEERS_COMM_TRACE=1: every counted call and its caller, on rank 0's log
            import traceback
            frames = traceback.extract_stack(limit=6)[:-2]
            print(f"[comm] {kind} {nbytes} B <- " + " <- ".join(
                f"{os.path.basename(f.filename)}:{f.lineno}:{f.name}" for f in reversed(frames)), flush=True)
        self.calls[kind] = self.calls.get(kind, 0) + 1
        self.payload[kind] = self.payload.get(kind, 0) + int(nbytes)

    def summary(self, world: int, steps: int) -> Dict[str, object]:
        """Per step, in accel's run-report layout (comm_per_step)."""
        n = max(1, steps)
        factor = {"all_reduce": 2.0 * (world - 1) / world, "reduce": (world - 1) / world,
                  "reduce_scatter": (world - 1) / world, "all_gather": (world - 1) / world, "broadcast": 1.0}
        by_kind = {k: {"calls": self.calls[k] / n, "payload_bytes": self.payload[k] / n,
                       "bus_bytes": self.payload[k] * factor.get(k, 1.0) / n} for k in sorted(self.calls)}
        return {"steps": steps, "bus_bytes": sum(v["bus_bytes"] for v in by_kind.values()), "by_kind": by_kind}


COUNTER = Counter()
_TRACE = os.environ.get("PEERS_COMM_TRACE") == "1" and os.environ.get("RANK", "0") == "0"


def _nbytes(x) -> int:
    if isinstance(x, torch.Tensor):
        if hasattr(x, "_local_tensor"):  # DTensor
            x = x._local_tensor
        return x.numel() * x.element_size()
    if isinstance(x, (list, tuple)):
        return sum(_nbytes(t) for t in x)
    return 0


def _sized_arg(name: str, args, kwargs):
    """The tensor(s) whose size is the op's payload in accel's convention."""
    def arg(i, *keys):
        for k in keys:
            if k in kwargs:
                return kwargs[k]
        return args[i] if len(args) > i else None
    if name in ("reduce_scatter_tensor", "_reduce_scatter_base"):
        return arg(1, "input", "input_tensor")  # the full input
    if name == "reduce_scatter":
        return arg(1, "input_list")
    if name in ("all_gather_into_tensor", "_all_gather_base"):
        return arg(0, "output_tensor", "output")  # the full output
    if name in ("all_gather", "all_gather_coalesced"):
        return arg(0, "tensor_list", "output_tensor_lists")
    if name == "all_reduce_coalesced":
        return arg(0, "tensors")
    return arg(0, "tensor")


def install() -> Counter:
    """Wrap the collectives once per process; returns the shared counter (disabled until enabled)."""
    if getattr(dist, "_peer_bench_counted", False):
        return COUNTER
    for name, kind in _OPS.items():
        orig = getattr(c10d, name, None) or getattr(dist, name, None)
        if orig is None:
            continue

        def make(orig=orig, name=name, kind=kind):
            @functools.wraps(orig)
            def wrapped(*args, **kwargs):
                COUNTER.add(kind, _nbytes(_sized_arg(name, args, kwargs)))
                return orig(*args, **kwargs)
            return wrapped
        w = make()
        for mod in (dist, c10d):
            if getattr(mod, name, None) is orig:
                setattr(mod, name, w)
    dist._peer_bench_counted = True
    return COUNTER
