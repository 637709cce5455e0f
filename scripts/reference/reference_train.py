#!/usr/bin/env python3
"""Independent reference trainer for spec/training.md (the numbers accel's C++ trainer is checked against).

One process simulates a world of W ranks by looping over them: for each optimizer step s, for each
micro-step m, for each rank r, the micro batch of windows ((s*G+m)*W+r)*B+b is forwarded and
backward-ed with loss_micro * (tokens_micro / tokens_global), so the accumulated gradient is the
gradient of the mean token cross-entropy over the whole global batch. Then: pre-clip global grad
norm, torch's clip_grad_norm_ when max_grad_norm > 0, lr from the spec's schedule written into
every param group, the optimizer step (torch.optim.AdamW, the spec's; or torch.optim.SGD as accel's
optimizer.name sgd does it), zero grads. Both optimizers use the same two groups: weight decay on params
with dim >= 2, none on the rest.

Outputs in --out-dir: metrics.jsonl (one JSON per step), weights.safetensors (fp32, spec names),
reference_config.json (the resolved settings), and on request grads_step<S>.safetensors.
See README.md in this folder for every choice made where the spec is silent.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import resource
import sys
import time
from collections import OrderedDict
from typing import Dict, List, Optional

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

import gpt_model  # noqa: E402
import safetensors_io  # noqa: E402
import token_data  # noqa: E402

# accel's defaults (runtime/config/job.hpp), so a job file and this CLI agree on unset keys.
DEFAULTS: Dict[str, object] = dict(
    world=1, micro_batch=8, accum=1, seq_len=128, steps=100,
    optimizer="adamw", lr=3.0e-4, weight_decay=0.1, beta1=0.9, beta2=0.95, eps=1.0e-8, momentum=0.9,
    warmup=10, min_lr_ratio=0.1, schedule="cosine", max_grad_norm=1.0,
    n_layer=4, n_head=4, n_embd=128, vocab_size=256, block_size=128,
    tokens=None, text=None, init_weights=None, seed_init=1337, export_init=None,
    out_dir=None, val_fraction=0.1, dtype="float32", threads=None, eval_every=0,
    dump_grads="", quiet=False,
)


class ConfigError(ValueError):
    pass


# ----------------------------------------------------------------------------- schedule, optimizer

def lr_at(s: int, lr: float, warmup: int, total: int, min_lr_ratio: float, schedule: str = "cosine") -> float:
    """spec/training.md: warmup (s+1)/W_u, then cosine to lr*min_lr_ratio, or constant."""
    if s < warmup:
        return lr * (s + 1) / warmup
    if schedule == "constant":
        return lr
    if schedule != "cosine":
        raise ValueError(f"unknown schedule {schedule!r}")
    lr_min = lr * min_lr_ratio
    p = (s - warmup) / max(1, total - warmup)
    return lr_min + 0.5 * (1.0 + math.cos(math.pi * p)) * (lr - lr_min)


def param_groups(model: torch.nn.Module, weight_decay: float) -> List[Dict[str, object]]:
    """The spec's decay rule, used for both optimizers (accel's builtin_param_group does the same):
    weight decay on parameters with dim >= 2, none on biases and LayerNorm parameters."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    return [{"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0}]


def make_optimizer(model: torch.nn.Module, lr: float, weight_decay: float, betas, eps: float,
                   name: str = "adamw", momentum: float = 0.0) -> torch.optim.Optimizer:
    """torch.optim.AdamW (the spec), or torch.optim.SGD (accel's optimizer.name sgd: coupled L2 decay,
    momentum with dampening 0, no Nesterov); betas and eps are AdamW's, momentum is SGD's."""
    groups = param_groups(model, weight_decay)
    if name == "adamw":
        return torch.optim.AdamW(groups, lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay)
    if name == "sgd":
        return torch.optim.SGD(groups, lr=lr, momentum=momentum, dampening=0.0, nesterov=False,
                               weight_decay=weight_decay)
    raise ValueError(f"unknown optimizer {name!r}")


def global_grad_norm(params) -> torch.Tensor:
    """L2 norm over all gradients, computed like torch.nn.utils.clip_grad_norm_ (norm of the norms)."""
    grads = [p.grad.detach() for p in params if p.grad is not None]
    return torch.norm(torch.stack([torch.norm(g, 2.0) for g in grads]), 2.0)


# ----------------------------------------------------------------------------- job file

def load_job(path: str) -> Dict[str, object]:
    """Map an accel job YAML onto this script's settings (only the keys that change the numbers)."""
    try:
        import yaml
    except ImportError:  # pragma: no cover
        raise ConfigError("--job needs PyYAML (python3-yaml); pass the values as flags instead") from None
    with open(path) as f:
        job = yaml.safe_load(f) or {}
    if not isinstance(job, dict):
        raise ConfigError(f"{path}: a job file is a YAML mapping")
    jdir = os.path.dirname(os.path.abspath(path))
    sec = lambda name: job.get(name) or {}  # noqa: E731
    out: Dict[str, object] = {}

    def take(section, key, dest, conv=lambda v: v):
        d = sec(section) if section else job
        if key in d:
            out[dest] = conv(d[key])

    take(None, "num_processes", "world", int)
    m = sec("model")
    if m.get("name", "gpt") != "gpt":
        raise ConfigError(f"model.name {m.get('name')!r}: the reference implements only gpt")
    for k in ("n_layer", "n_head", "n_embd", "vocab_size", "block_size"):
        take("model", k, k, int)
    d = sec("data")
    kind = d.get("kind", "synthetic")
    if kind == "synthetic":
        raise ConfigError("data.kind synthetic: accel's built-in synthetic stream is not part of the spec; "
                          "use data.kind tokens (make_tokens.py writes one) or text")
    if d.get("order", "sequential") != "sequential":
        raise ConfigError(f"data.order {d.get('order')!r}: the reference implements the sequential order only")
    if kind not in ("tokens", "text"):
        raise ConfigError(f"data.kind {kind!r}: expected tokens or text")
    dpath = d.get("path") or ""
    if not dpath:
        raise ConfigError(f"data.kind {kind} needs data.path")
    dpath = dpath if os.path.isabs(dpath) else os.path.join(jdir, dpath)  # relative to the job file
    out["tokens" if kind == "tokens" else "text"] = dpath
    take("data", "val_fraction", "val_fraction", float)
    o = sec("optimizer")
    if o.get("name", "adamw") not in ("adamw", "sgd"):
        raise ConfigError(f"optimizer.name {o.get('name')!r}: expected adamw (the spec's) or sgd (accel's)")
    take("optimizer", "name", "optimizer", str)
    take("optimizer", "momentum", "momentum", float)
    take("optimizer", "lr", "lr", float)
    take("optimizer", "weight_decay", "weight_decay", float)
    take("optimizer", "eps", "eps", float)
    if "betas" in o:
        b = o["betas"]
        if not isinstance(b, (list, tuple)) or len(b) != 2:
            raise ConfigError(f"optimizer.betas {b!r}: expected a list of 2 numbers")
        out["beta1"], out["beta2"] = float(b[0]), float(b[1])
    take("scheduler", "name", "schedule", str)
    take("scheduler", "warmup_steps", "warmup", int)
    take("scheduler", "min_lr_ratio", "min_lr_ratio", float)
    ds = sec("deepspeed")  # DeepSpeed aliases of training keys
    if "gradient_clipping" in ds:
        out["max_grad_norm"] = float(ds["gradient_clipping"])
    if "gradient_accumulation_steps" in ds:
        out["accum"] = int(ds["gradient_accumulation_steps"])
    take("training", "max_steps", "steps", int)
    take("training", "micro_batch_size", "micro_batch", int)
    take("training", "gradient_accumulation_steps", "accum", int)
    take("training", "seq_len", "seq_len", int)
    take("training", "max_grad_norm", "max_grad_norm", float)
    take("training", "seed", "seed_init", int)
    take("training", "output_dir", "out_dir", str)
    take("training", "eval_every", "eval_every", int)
    init_from = sec("training").get("init_from") or ""
    if init_from:
        cand = init_from if os.path.isabs(init_from) else os.path.join(jdir, init_from)
        out["init_weights"] = cand if os.path.exists(cand) else init_from
    mp = job.get("mixed_precision", "no")
    if mp not in ("no", False, None):
        print(f"[reference] warning: mixed_precision {mp!r} ignored: the reference computes in fp32/fp64",
              file=sys.stderr)
    if m.get("dtype", "fp32") != "fp32":
        print(f"[reference] warning: model.dtype {m.get('dtype')!r} ignored: the reference keeps fp32/fp64 "
              f"parameters", file=sys.stderr)
    return out


# ----------------------------------------------------------------------------- config

def validate(cfg: Dict[str, object]) -> None:
    def pos(k):
        if int(cfg[k]) < 1:
            raise ConfigError(f"{k} must be >= 1 (got {cfg[k]})")
    for k in ("world", "micro_batch", "accum", "seq_len", "n_layer", "n_head", "n_embd", "vocab_size", "block_size"):
        pos(k)
    if int(cfg["steps"]) < 0:
        raise ConfigError("steps must be >= 0")
    if cfg["seq_len"] > cfg["block_size"] and int(cfg["steps"]) > 0:
        raise ConfigError(f"seq_len {cfg['seq_len']} exceeds block_size {cfg['block_size']}")
    if cfg["n_embd"] % cfg["n_head"]:
        raise ConfigError(f"n_embd {cfg['n_embd']} is not divisible by n_head {cfg['n_head']}")
    if cfg["optimizer"] not in ("adamw", "sgd"):
        raise ConfigError(f"optimizer {cfg['optimizer']!r}: expected adamw or sgd")
    if not (0.0 <= float(cfg["momentum"]) <= 1.0):
        raise ConfigError(f"momentum {cfg['momentum']} not in [0, 1]")
    if cfg["schedule"] not in ("cosine", "constant"):
        raise ConfigError(f"schedule {cfg['schedule']!r}: expected cosine or constant")
    if cfg["dtype"] not in ("float32", "float64"):
        raise ConfigError(f"dtype {cfg['dtype']!r}: expected float32 or float64")
    if not (0.0 <= float(cfg["val_fraction"]) < 1.0):
        raise ConfigError(f"val_fraction {cfg['val_fraction']} not in [0, 1)")
    if cfg["tokens"] and cfg["text"]:
        raise ConfigError("give --tokens or --text, not both")


def resolve(cli: Dict[str, object], job: Optional[Dict[str, object]] = None) -> Dict[str, object]:
    """defaults < job file < explicit command-line flags."""
    cfg = dict(DEFAULTS)
    cfg.update(job or {})
    cfg.update({k: v for k, v in cli.items() if v is not None and k in DEFAULTS})
    validate(cfg)
    return cfg


def load_stream(cfg) -> "torch.Tensor":
    if cfg.get("tokens"):
        toks = token_data.read_tokens(cfg["tokens"])
    elif cfg.get("text"):
        toks = token_data.read_text_as_tokens(cfg["text"])
    else:
        raise ConfigError("no data: give --tokens FILE (llm.c format) or --text FILE")
    if len(toks) and int(toks.max()) >= int(cfg["vocab_size"]):
        raise ConfigError(f"token {int(toks.max())} is outside vocab_size {cfg['vocab_size']}")
    return toks


# ----------------------------------------------------------------------------- training

@torch.no_grad()
def evaluate(model, data: token_data.TokenWindows, chunk: int = 64) -> float:
    """Mean token cross-entropy over every held-out window (all windows have T tokens)."""
    ids = data.val_window_ids()
    total, count = 0.0, 0
    for i in range(0, len(ids), chunk):
        x, y = data.windows(ids[i:i + chunk])
        _, loss = model(x, y)
        total += float(loss) * y.numel()
        count += y.numel()
    return total / max(1, count)


def train(cfg: Dict[str, object], tokens=None, log=print) -> Dict[str, object]:
    """Run the reference training. Returns {"metrics": [...], "weights": OrderedDict (compute dtype),
    "init_weights": OrderedDict (fp32)}; writes files when cfg["out_dir"] is set."""
    validate(cfg)
    if cfg.get("threads"):
        torch.set_num_threads(int(cfg["threads"]))
    dtype = torch.float64 if cfg["dtype"] == "float64" else torch.float32
    W, B, G, T, S = (int(cfg[k]) for k in ("world", "micro_batch", "accum", "seq_len", "steps"))
    if tokens is None:
        tokens = load_stream(cfg)
    data = token_data.TokenWindows(tokens, T, float(cfg["val_fraction"]))

    model = gpt_model.GPT(int(cfg["n_layer"]), int(cfg["n_head"]), int(cfg["n_embd"]),
                          int(cfg["vocab_size"]), int(cfg["block_size"]))
    if cfg.get("init_weights"):
        gpt_model.load_weights_(model, safetensors_io.load_file(cfg["init_weights"]))
    else:
        gpt_model.init_weights_(model, int(cfg["seed_init"]))
    model = model.to(dtype)
    init_fp32 = gpt_model.state_dict_fp(model, torch.float32)
    out_dir = cfg.get("out_dir")
    if out_dir:
        os.makedirs(out_dir, exist_ok=True)
    if cfg.get("export_init"):
        os.makedirs(os.path.dirname(os.path.abspath(cfg["export_init"])), exist_ok=True)
        safetensors_io.save_file(init_fp32, cfg["export_init"], {"format": "pt", "producer": "accel reference_train.py"})

    params = list(model.parameters())
    opt = make_optimizer(model, float(cfg["lr"]), float(cfg["weight_decay"]),
                         (float(cfg["beta1"]), float(cfg["beta2"])), float(cfg["eps"]),
                         name=str(cfg["optimizer"]), momentum=float(cfg["momentum"]))
    dump_steps = {int(x) for x in str(cfg.get("dump_grads") or "").split(",") if x.strip()}
    tokens_micro = B * T
    tokens_global = W * G * B * T
    scale = tokens_micro / tokens_global
    max_norm = float(cfg["max_grad_norm"])
    eval_every = int(cfg.get("eval_every") or 0)

    metrics: List[Dict[str, object]] = []
    mfile = open(os.path.join(out_dir, "metrics.jsonl"), "w") if out_dir else None
    if out_dir:
        with open(os.path.join(out_dir, "reference_config.json"), "w") as f:
            json.dump({**cfg, "n_windows": data.n, "n_train_windows": data.n_train,
                       "n_val_windows": data.n_val, "tokens_in_stream": int(len(data.tokens)),
                       "torch": torch.__version__, "threads": torch.get_num_threads()}, f, indent=1)
    try:
        for s in range(S):
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            loss_sum = 0.0
            for m in range(G):
                for r in range(W):
                    x, y = data.train_batch(s, m, r, W, B, G)
                    _, loss = model(x, y)
                    (loss * scale).backward()
                    loss_sum += float(loss.detach()) * scale
            norm = global_grad_norm(params)
            if s in dump_steps and out_dir:
                grads = OrderedDict((n, p.grad.detach().clone()) for n, p in model.named_parameters())
                safetensors_io.save_file(grads, os.path.join(out_dir, f"grads_step{s}.safetensors"))
            if max_norm > 0:
                # torch's clip: coef = max_norm/(norm+1e-6), clamped to 1; returns the pre-clip norm
                norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
            lr = lr_at(s, float(cfg["lr"]), int(cfg["warmup"]), S, float(cfg["min_lr_ratio"]), cfg["schedule"])
            for g in opt.param_groups:
                g["lr"] = lr
            opt.step()
            dt = time.perf_counter() - t0
            rec = OrderedDict(step=s, loss=loss_sum, lr=lr, grad_norm=float(norm), tokens=tokens_global,
                              step_time_s=dt, tokens_per_s=tokens_global / dt if dt > 0 else None,
                              peak_mem_bytes=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
            if eval_every > 0 and (s + 1) % eval_every == 0 and data.n_val > 0:
                rec["eval_loss"] = evaluate(model, data)
            metrics.append(rec)
            if mfile:
                mfile.write(json.dumps(rec) + "\n")
                mfile.flush()
            if log and not cfg.get("quiet"):
                ev = f" eval_loss {rec['eval_loss']:.6f}" if "eval_loss" in rec else ""
                log(f"step {s:5d}/{S} loss {loss_sum:.6f} lr {lr:.4e} grad_norm {float(norm):.6f} "
                    f"{dt * 1000:.1f} ms{ev}")
    finally:
        if mfile:
            mfile.close()

    final = OrderedDict((n, p.detach().clone()) for n, p in model.named_parameters())
    if out_dir:
        meta = {"format": "pt", "producer": "accel reference_train.py", "steps": str(S), "dtype": cfg["dtype"]}
        safetensors_io.save_file(OrderedDict((n, t.to(torch.float32)) for n, t in final.items()),
                                 os.path.join(out_dir, "weights.safetensors"), meta)
        if dtype == torch.float64:
            safetensors_io.save_file(final, os.path.join(out_dir, "weights_float64.safetensors"), meta)
    return {"metrics": metrics, "weights": final, "init_weights": init_fp32,
            "n_train_windows": data.n_train, "n_val_windows": data.n_val}


# ----------------------------------------------------------------------------- CLI

def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description="Reference trainer for accel's spec/training.md (GPT, sequential llm.c data, AdamW or SGD).",
        epilog="Precedence: built-in defaults (accel's) < --job file < explicit flags.")
    a = p.add_argument
    a("--job", help="accel job YAML: take world/model/data/optimizer/scheduler/training values from it")
    g = p.add_argument_group("batch")
    g.add_argument("--world", type=int, help="simulated ranks W (default 1)")
    g.add_argument("--micro-batch", dest="micro_batch", type=int, help="sequences per rank per micro-step B (8)")
    g.add_argument("--accum", type=int, help="gradient accumulation micro-steps G (1)")
    g.add_argument("--seq-len", dest="seq_len", type=int, help="tokens per sequence T (128)")
    g.add_argument("--steps", type=int, help="optimizer steps S (100); 0 with --export-init only exports")
    g = p.add_argument_group("optimizer and schedule")
    g.add_argument("--optimizer", choices=["adamw", "sgd"], help="(adamw)")
    g.add_argument("--lr", type=float, help="peak lr (3e-4)")
    g.add_argument("--weight-decay", dest="weight_decay", type=float,
                   help="decay on dim>=2 params: decoupled for adamw, L2 in the gradient for sgd (0.1)")
    g.add_argument("--momentum", type=float, help="SGD momentum, 0 disables (0.9)")
    g.add_argument("--beta1", type=float, help="(0.9)")
    g.add_argument("--beta2", type=float, help="(0.95)")
    g.add_argument("--eps", type=float, help="(1e-8)")
    g.add_argument("--warmup", type=int, help="warmup steps W_u (10)")
    g.add_argument("--min-lr-ratio", dest="min_lr_ratio", type=float, help="cosine floor / lr (0.1)")
    g.add_argument("--schedule", choices=["cosine", "constant"], help="(cosine)")
    g.add_argument("--max-grad-norm", dest="max_grad_norm", type=float, help="clip norm, 0 disables (1.0)")
    g = p.add_argument_group("model")
    g.add_argument("--n-layer", dest="n_layer", type=int, help="(4)")
    g.add_argument("--n-head", dest="n_head", type=int, help="(4)")
    g.add_argument("--n-embd", dest="n_embd", type=int, help="(128)")
    g.add_argument("--vocab-size", dest="vocab_size", type=int, help="(256)")
    g.add_argument("--block-size", dest="block_size", type=int, help="(128)")
    g.add_argument("--dtype", choices=["float32", "float64"], help="compute and parameter dtype (float32)")
    g = p.add_argument_group("data, weights, outputs")
    g.add_argument("--tokens", help="llm.c token file (magic 20240520, uint16 tokens)")
    g.add_argument("--text", help="text file read as byte tokens (accel's data.kind text)")
    g.add_argument("--val-fraction", dest="val_fraction", type=float,
                   help="held-out fraction of windows, at the end (0.1, accel's default); 0 = none")
    g.add_argument("--init-weights", dest="init_weights", help="safetensors with the full initial weights")
    g.add_argument("--seed-init", dest="seed_init", type=int, help="seed of the spec init when no --init-weights (1337)")
    g.add_argument("--export-init", dest="export_init", help="write the initial weights (fp32 safetensors) here")
    g.add_argument("--out-dir", dest="out_dir", help="metrics.jsonl, weights.safetensors, reference_config.json")
    g.add_argument("--eval-every", dest="eval_every", type=int,
                   help="eval_loss on all held-out windows after every N steps (0: never)")
    g.add_argument("--dump-grads", dest="dump_grads", help="comma list of steps whose pre-clip grads to write")
    g.add_argument("--threads", type=int, help="torch.set_num_threads (default: torch's)")
    g.add_argument("--quiet", action="store_true", default=None, help="no per-step log lines")
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        job = load_job(args.job) if args.job else None
        cfg = resolve(vars(args), job)
        if not (cfg["tokens"] or cfg["text"]) and int(cfg["steps"]) > 0:
            raise ConfigError("no data: give --tokens FILE or --text FILE (or --steps 0 with --export-init)")
        if not cfg["out_dir"] and int(cfg["steps"]) > 0:
            raise ConfigError("give --out-dir (or training.output_dir in the job)")
        if cfg["init_weights"]:
            init = safetensors_io.load_file(cfg["init_weights"])
            shapes = gpt_model.expected_shapes(int(cfg["n_layer"]), int(cfg["n_embd"]), int(cfg["vocab_size"]),
                                               int(cfg["block_size"]))
            got = OrderedDict((n, tuple(t.shape)) for n, t in init.items())
            if dict(got) != dict(shapes):
                diff = sorted(set(got.items()) ^ set(shapes.items()))[:6]
                raise ConfigError(f"{cfg['init_weights']} does not hold this model's parameters "
                                  f"(first differences, name and shape: {diff})")
        tokens = load_stream(cfg) if (cfg["tokens"] or cfg["text"]) else None
        if tokens is None:  # export only: any stream with one window will do
            import numpy as np
            cfg["seq_len"] = min(int(cfg["seq_len"]), int(cfg["block_size"]))
            tokens = np.zeros(int(cfg["seq_len"]) + 1, dtype=np.int64)
            cfg["val_fraction"] = 0.0
    except (ConfigError, token_data.TokenFileError, safetensors_io.SafetensorsError, OSError, ValueError) as e:
        print(f"reference_train: error: {e}", file=sys.stderr)
        return 2
    try:
        res = train(cfg, tokens)
    except (ValueError, OSError, RuntimeError) as e:
        print(f"reference_train: run failed: {e}", file=sys.stderr)
        return 1
    if res["metrics"]:
        last = res["metrics"][-1]
        print(f"done: {len(res['metrics'])} steps, final loss {last['loss']:.6f}"
              + (f", outputs in {cfg['out_dir']}" if cfg["out_dir"] else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
