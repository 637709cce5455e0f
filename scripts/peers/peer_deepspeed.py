"""DeepSpeed ZeRO 1, 2, 3 as a bench peer, on the CPU accelerator with gloo.

DS_ACCELERATOR=cpu (set by the bench), deepspeed.init_distributed("gloo"), the config of
ds_config.py, and a client torch.optim.AdamW with the reference's two groups (in
ZERO_SUPPORTED_OPTIMIZERS, so no untested-optimizer flag and no compiled Adam). DeepSpeed has no
scheduler here: the spec lr is written into the optimizer's groups before each boundary step.
engine.backward divides the loss by gradient_accumulation_steps itself; engine.step() is called
after every micro-step and updates only at the boundary. Clipping is DeepSpeed's own
(gradient_clipping in the config). ZeRO-3: the tied embedding is read outside its module (the
output head is x @ wte^T in GPT.forward); DeepSpeed detects such external parameters itself, and
the peer registers it explicitly as well.

The shm comm op (deepspeed_shm_comm) DeepSpeed JIT-builds at init is used only by its inference
all-reduce; the bench builds it once before any timed run (bench_peers.py --prebuild). With
skip_shm_build (the test suite) it is marked incompatible so that init does not compile it: the
training collectives are torch.distributed's either way.
"""
from __future__ import annotations

import os

import torch

from peer_common import Peer, lm_loss, decay_names, make_adamw, ordered_full, set_lr
import ds_config


class DeepSpeedZero(Peer):
    def __init__(self, spec, contender, model: torch.nn.Module, skip_shm_build: bool = False):
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
        import deepspeed
        if skip_shm_build:
            deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False
        deepspeed.init_distributed(dist_backend="gloo")
        self.spec = spec
        self.stage = int(contender.option.split("-")[0])
        release = contender.option.endswith("-release")
        decay = decay_names(model)
        opt = make_adamw(model.named_parameters(), decay, spec)
        if spec.ds_config_dir:  # the JSON the Accelerate config files name (bench --accel-config accelerate)
            path = os.path.join(spec.ds_config_dir, f"deepspeed_zero{self.stage}.json")
            self.cfg = ds_config.from_file(path, spec, self.stage, release=release)
        else:
            self.cfg = ds_config.deepspeed_config(spec, self.stage, release=release)
        self.engine, self.opt, _, _ = deepspeed.initialize(model=model, optimizer=opt, config=self.cfg)
        self.client_opt = opt  # its param_groups are the ones DeepSpeed steps with
        if self.stage == 3:
            deepspeed.zero.register_external_parameter(self.engine.module, self.engine.module.wte.weight)
        self.deepspeed = deepspeed
        self.info = {"deepspeed": {"version": deepspeed.__version__, "config": self.cfg,
                                   "optimizer": type(self.engine.optimizer).__name__,
                                   "base_optimizer": type(opt).__name__,
                                   "shm_op": "skipped" if skip_shm_build else "built"}}

    def micro(self, x, y, sync, accum):
        loss = lm_loss(self.engine(x), y)
        self.engine.backward(loss)
        if not sync:
            self.engine.step()  # not a boundary: DeepSpeed only counts the micro-step
        return float(loss.detach().float())

    def step(self, lr):
        set_lr(self.client_opt, lr)
        self.engine.step()
        norm = self.engine.get_global_grad_norm()
        return float(norm) if norm is not None else float("nan")

    def full_weights(self):
        module = self.engine.module
        if self.stage == 3:
            with self.deepspeed.zero.GatheredParameters(list(module.parameters()), modifier_rank=None):
                return ordered_full(module.named_parameters())
        return ordered_full(module.named_parameters())

    def state_roots(self):
        return [self.engine.module, self.engine.optimizer]
