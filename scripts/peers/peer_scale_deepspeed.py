#!/usr/bin/env python3
"""One rank of DeepSpeed ZeRO-3 in the scale benchmark (scripts/bench_scale.py, variants ds_zero3*).

  peer_scale_deepspeed.py RUN_DIR     (torchrun's environment: RANK, WORLD_SIZE, MASTER_ADDR/PORT)

RUN_DIR/spec.json holds the model shape, steps, threads, the DeepSpeed config ("ds_config") and
which optimizer to build ("optimizer": torch_adamw or ds_cpu_adam). On the CPU accelerator with
gloo, the rank builds the spec GPT (scripts/reference/gpt_model.py) inside
deepspeed.zero.Init(config_dict_or_path=ds_config, remote_device=...): each module's parameters
are partitioned as soon as that module is constructed, so the model never exists whole on a rank
(remote_device cpu or nvme puts the partitions straight into the offload). The values are random,
drawn in scope by each Linear and Embedding as it is built, from the spec's distributions (weights
N(0, 0.02), biases 0; LayerNorm 1 and 0), not from the spec's seeded stream; loading a whole weights
file would put the whole model on every rank and defeat the point (a DeepSpeed user loads per
module under GatheredParameters). zero.Init takes its dtype from the config (fp32 here): an explicit
dtype=torch.float32 becomes bf16 on a CPU without oneDNN fp16 in DeepSpeed 0.19.8 (in
Init._set_dtype the conditional expression binds before its `or`; a first run with it gave
bf16-rounded losses). result.json records the partitions' dtypes.

Then deepspeed.initialize with AdamW in the reference's two groups, and spec.steps steps of one
micro batch of random tokens (seeded by step and rank). Each rank measures VmHWM after initialize
(the setup peak: process start to the end of setup, imports included) and after the last step
(the run peak), setup seconds (zero.Init through initialize), each step's seconds and its loss
(mean over ranks); rank 0 writes RUN_DIR/result.json.
"""
from __future__ import annotations

import json
import os
import sys
import time

T_PROCESS = time.perf_counter()
sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(os.path.dirname(HERE), "reference")]


def adamw(spec, model):
    """AdamW in the reference's groups (decay on dim >= 2). A partitioned parameter keeps its
    shape in ds_shape; its .dim() is that of the empty placeholder."""
    import torch
    shaped = [(p, len(getattr(p, "ds_shape", p.shape))) for p in model.parameters()]
    groups = [{"params": [p for p, d in shaped if d >= 2], "weight_decay": spec["weight_decay"]},
              {"params": [p for p, d in shaped if d < 2], "weight_decay": 0.0}]
    kw = dict(lr=spec["lr"], betas=(0.9, 0.95), eps=1e-8, weight_decay=spec["weight_decay"])
    if spec["optimizer"] == "ds_cpu_adam":
        from deepspeed.ops.adam import DeepSpeedCPUAdam
        return DeepSpeedCPUAdam(groups, adamw_mode=True, **kw)
    return torch.optim.AdamW(groups, **kw)


def spec_distribution_init():
    """Linear and Embedding reset_parameters drawing the spec's distributions while the model is
    built (the default Embedding init, N(0, 1), makes the tied logits and the loss enormous)."""
    import contextlib
    import torch.nn as nn

    def linear(self):
        nn.init.normal_(self.weight, 0.0, 0.02)
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def embedding(self):
        nn.init.normal_(self.weight, 0.0, 0.02)

    @contextlib.contextmanager
    def scope():
        saved = nn.Linear.reset_parameters, nn.Embedding.reset_parameters
        nn.Linear.reset_parameters, nn.Embedding.reset_parameters = linear, embedding
        try:
            yield
        finally:
            nn.Linear.reset_parameters, nn.Embedding.reset_parameters = saved
    return scope()


def main() -> int:
    run_dir = sys.argv[1]
    with open(os.path.join(run_dir, "spec.json")) as f:
        spec = json.load(f)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    import torch
    import torch.distributed as dist
    torch.set_num_threads(spec["threads"])
    import deepspeed
    import gpt_model
    from procs import vm_hwm_bytes
    # The shm comm op serves only DeepSpeed's inference all-reduce, and each rank's 66 MiB /dev/shm
    # segment outlives the rank (never unlinked): skip building and mapping it.
    deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False
    deepspeed.init_distributed(dist_backend="gloo")
    cfg = spec["ds_config"]
    remote = cfg["zero_optimization"].get("offload_param", {}).get("device", "none")
    t_import = time.perf_counter() - T_PROCESS

    t0 = time.perf_counter()
    with deepspeed.zero.Init(config_dict_or_path=cfg, remote_device=None if remote == "none" else remote), \
            spec_distribution_init():
        model = gpt_model.GPT(spec["n_layer"], spec["n_head"], spec["n_embd"], spec["vocab_size"], spec["seq_len"])
    built_s = time.perf_counter() - t0
    built_rss = vm_hwm_bytes()
    # The output head reads wte.weight outside its module (logits = x @ wte^T).
    deepspeed.zero.register_external_parameter(model, model.wte.weight)
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=adamw(spec, model), config=cfg)
    setup_s = time.perf_counter() - t0
    setup_peak = vm_hwm_bytes()

    steps = []
    for s in range(spec["steps"]):
        g = torch.Generator().manual_seed(1000 * s + rank)
        tokens = torch.randint(0, spec["vocab_size"], (1, spec["seq_len"] + 1), generator=g)
        t = time.perf_counter()
        _, loss = engine(tokens[:, :-1], tokens[:, 1:])
        engine.backward(loss)
        engine.step()
        mean = loss.detach().double().reshape(1)
        dist.all_reduce(mean)
        steps.append({"step": s, "loss": float(mean.item()) / world, "step_time_s": time.perf_counter() - t})

    mine = {"rank": rank, "setup_peak_rss_bytes": setup_peak, "peak_rss_bytes": vm_hwm_bytes(),
            "built_peak_rss_bytes": built_rss, "import_s": t_import, "zero_init_s": built_s, "setup_s": setup_s,
            "step_times_s": [r["step_time_s"] for r in steps]}
    everyone = [None] * world
    dist.all_gather_object(everyone, mine)
    if rank == 0:
        params = sum(int(p.ds_numel) for p in engine.module.parameters())
        dtypes = sorted({str(p.ds_tensor.dtype) for p in engine.module.parameters()})
        result = {"ranks": everyone, "steps": steps, "params": params, "deepspeed": deepspeed.__version__,
                  "torch": torch.__version__, "optimizer": type(engine.optimizer).__name__,
                  "base_optimizer": type(engine.basic_optimizer).__name__,
                  "param_dtypes": dtypes, "threads": torch.get_num_threads()}
        tmp = os.path.join(run_dir, "result.json.tmp")
        with open(tmp, "w") as f:
            json.dump(result, f, indent=1)
        os.replace(tmp, os.path.join(run_dir, "result.json"))
    dist.barrier()  # rank 0 hosts the store: everyone leaves together
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # skip teardown: nothing is owed once the result is written


if __name__ == "__main__":
    sys.exit(main())
