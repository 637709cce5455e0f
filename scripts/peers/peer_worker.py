#!/usr/bin/env python3
"""One rank of a Python peer (torch DDP, Accelerate DDP, FSDP2, FSDP1, DeepSpeed ZeRO) in the bench.

  peer_worker.py RUN_DIR        (torchrun's environment: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT)

RUN_DIR holds spec.json (settings.RunSpec plus "contender": its key). The rank builds the spec GPT
(scripts/reference/gpt_model.py), loads spec.init_path, wraps it as the contender does, and trains
spec.steps steps on the spec's batches (window ((s*G+m)*W+r)*B+b of spec.tokens_path): per step,
zero_grad, G micro-steps, then clip + lr + optimizer step, then the mean loss over ranks (one
all-reduce, as accel's trainer does). A step is timed on each rank from its start to the loss
all-reduce. After the warm-up steps, collectives are counted (comm_count.py). At the end every rank
measures its model-state bytes (state_bytes.py) and VmHWM, rank 0 writes RUN_DIR/result.json and,
with spec.save_weights, RUN_DIR/weights.safetensors (the full weights, spec names, fp32).
"""
from __future__ import annotations

import faulthandler
import json
import os
import sys
import time

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
REF = os.path.join(os.path.dirname(HERE), "reference")
sys.path[:0] = [HERE, REF]

import comm_count  # noqa: E402  (before torch.distributed is used by anything)
from settings import CONTENDERS, RunSpec  # noqa: E402


def make_peer(spec, contender, model):
    fam = contender.family
    if fam == "torch":
        from peer_ddp import TorchDDP
        return TorchDDP(spec, contender, model)
    if fam == "accelerate":
        from peer_ddp import AccelerateDDP
        return AccelerateDDP(spec, contender, model)
    if fam == "fsdp2":
        from peer_fsdp import FSDP2
        return FSDP2(spec, contender, model)
    if fam == "fsdp1":
        from peer_fsdp import FSDP1
        return FSDP1(spec, contender, model)
    if fam == "deepspeed":
        from peer_deepspeed import DeepSpeedZero
        return DeepSpeedZero(spec, contender, model, skip_shm_build=os.environ.get("PEERS_DS_SKIP_SHM") == "1")
    raise ValueError(f"peer_worker: {contender.key} is not a Python peer")


def main() -> int:
    run_dir = sys.argv[1]
    with open(os.path.join(run_dir, "spec.json")) as f:
        raw = json.load(f)
    spec = RunSpec.from_json(raw)
    contender = next(c for c in CONTENDERS if c.key == raw["contender"])
    faulthandler.dump_traceback_later(spec.timeout_s, exit=True)  # a hung rank shows where it hung
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if world != spec.world:
        raise SystemExit(f"peer_worker: WORLD_SIZE {world} but the spec says {spec.world}")

    import torch
    import torch.distributed as dist
    torch.set_num_threads(spec.threads)
    counter = comm_count.install() if spec.count_comm else None
    import gpt_model
    import safetensors_io
    import token_data
    from procs import vm_hwm_bytes
    import state_bytes

    t_setup = time.perf_counter()
    model = gpt_model.GPT(spec.n_layer, spec.n_head, spec.n_embd, spec.vocab_size, spec.seq_len)
    gpt_model.load_weights_(model, safetensors_io.load_file(spec.init_path))
    peer = make_peer(spec, contender, model)
    data = token_data.TokenWindows(token_data.read_tokens(spec.tokens_path), spec.seq_len, spec.val_fraction)
    setup_s = time.perf_counter() - t_setup

    W, B, G = spec.world, spec.micro_batch, spec.accum
    records = []
    for s in range(spec.steps):
        if s == spec.warmup_steps:
            dist.barrier()
            if counter:
                counter.reset()
                counter.enabled = True
        t0 = time.perf_counter()
        peer.zero_grad()
        loss_sum = 0.0
        for m in range(G):
            x, y = data.train_batch(s, m, rank, W, B, G)
            loss_sum += peer.micro(x, y, sync=(m == G - 1), accum=G)
        lr = spec.lr_at(s)
        norm = peer.step(lr)
        t = torch.tensor([loss_sum / G], dtype=torch.float64)
        dist.all_reduce(t)
        dt = time.perf_counter() - t0
        records.append({"step": s, "loss": float(t.item()) / W, "lr": lr, "grad_norm": norm, "step_time_s": dt,
                        "tokens": spec.tokens_per_step})
    if counter:
        counter.enabled = False
    held = state_bytes.held_bytes(peer.state_roots(), max_depth=64)
    mine = {"rank": rank, "peak_rss_bytes": vm_hwm_bytes(), "model_state_bytes": held["bytes"],
            "step_times_s": [r["step_time_s"] for r in records],
            "comm_per_step": counter.summary(world, spec.timed_steps) if counter else None}
    everyone = [None] * world
    dist.all_gather_object(everyone, mine)
    weights = peer.full_weights() if spec.save_weights else None
    if rank == 0:
        if weights is not None:
            order = gpt_model.param_names(spec.n_layer)
            missing = [n for n in order if n not in weights]
            if missing:
                raise RuntimeError(f"full weights lack {missing[:5]} (got {list(weights)[:5]})")
            from collections import OrderedDict
            safetensors_io.save_file(OrderedDict((n, weights[n]) for n in order),
                                     os.path.join(run_dir, "weights.safetensors"),
                                     {"format": "pt", "producer": f"bench_peers {contender.key}"})
        result = {"contender": contender.key, "records": records, "ranks": everyone, "setup_s": setup_s,
                  "info": peer.info, "torch": torch.__version__, "threads": torch.get_num_threads()}
        tmp = os.path.join(run_dir, "result.json.tmp")
        with open(tmp, "w") as f:
            json.dump(result, f, indent=1)
        os.replace(tmp, os.path.join(run_dir, "result.json"))
    dist.barrier()  # rank 0 hosts the store: everyone leaves together
    faulthandler.cancel_dump_traceback_later()
    # Leave without running C++ destructors: tearing down gloo after FSDP1 intermittently aborted a
    # rank ("terminate called without an active exception", about 1 run in 3) after its results
    # were complete. Everything this rank owes is written and flushed above.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
