#!/usr/bin/env python3
"""Independent reference for accel's optimizer step (spec/training.md, "Optimizer, schedule, clipping").

Reads a JSON case written by test_python_reference.cpp: hyperparameters, initial parameters and
per-step gradients. Runs torch.optim.AdamW (torch 2.11, accel's Python environment) with two param groups,
weight decay on parameters with 2 or more dimensions only, the spec's learning-rate schedule
written here from the formula, and torch.nn.utils.clip_grad_norm_. Writes the learning rates, the
pre-clip gradient norms and the final parameters as JSON. Floats go through Python floats (doubles),
so every fp32 value crosses the file exactly.

usage: adamw_reference.py CASE.json RESULT.json
"""
import json
import math
import sys

import torch


def learning_rate(case, step):
    lr, warmup, total = case["lr"], case["warmup_steps"], case["total_steps"]
    if step < warmup:
        return lr * (step + 1) / warmup
    lr_min = lr * case["min_lr_ratio"]
    p = min(1.0, (step - warmup) / max(1, total - warmup))
    return lr_min + 0.5 * (1.0 + math.cos(math.pi * p)) * (lr - lr_min)


def main(case_path, result_path):
    with open(case_path) as f:
        case = json.load(f)
    torch.set_num_threads(1)
    names = [p["name"] for p in case["params"]]
    params = [torch.tensor(p["data"], dtype=torch.float32).reshape(p["shape"]).requires_grad_(True)
              for p in case["params"]]
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": case["weight_decay"]}, {"params": no_decay, "weight_decay": 0.0}],
        lr=case["lr"], betas=tuple(case["betas"]), eps=case["eps"], foreach=False)

    lrs, norms = [], []
    for step, grads in enumerate(case["grads"]):
        for p, g in zip(params, grads):
            p.grad = torch.tensor(g, dtype=torch.float32).reshape(p.shape)
        norm = torch.nn.utils.clip_grad_norm_(params, case["max_grad_norm"])
        lr = learning_rate(case, step)
        for group in opt.param_groups:
            group["lr"] = lr
        opt.step()
        lrs.append(lr)
        norms.append(float(norm))

    result = {"torch_version": torch.__version__, "lrs": lrs, "grad_norms": norms,
              "params": {n: p.detach().reshape(-1).tolist() for n, p in zip(names, params)}}
    with open(result_path, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
