"""An independent implementation of accel's built-in models (`gpt`, and `mlp`), written from
spec/training.md alone, for Debian's Python torch. The C++ tests run it to cross-check accel's
forward, loss and init. It reads and writes safetensors with scripts/reference/safetensors_io.py
(the `safetensors` package is not installed).

usage:
  gpt_reference.py forward WEIGHTS INPUTS OUT [--model gpt|mlp] [--n-head H]
      WEIGHTS: the model's parameters under spec names; INPUTS: 'idx' and 'targets' (I64 [B, T]).
      Writes OUT with 'logits' (F32 [B, T, V]) and 'loss' (F32 scalar, mean token cross-entropy).
      --n-head is required for gpt.
  gpt_reference.py init OUT [--model gpt|mlp] --n-layer L --n-embd C --vocab-size V --block-size T --seed S
      Writes the spec initialisation, drawing in the RNG order documented in spec_init.hpp
      (--block-size is ignored for mlp, which has no position table).
"""
import argparse
import math
import os
import sys

import torch

# The reference trainer's safetensors codec (struct + json): one Python implementation of the format.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "scripts", "reference"))
from safetensors_io import load_file as read_safetensors  # noqa: E402
from safetensors_io import save_file  # noqa: E402


def write_safetensors(path, tensors):
    save_file(tensors, path)


def layer_norm(x, weight, bias):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + 1e-5) * weight + bias


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def linear(x, W, prefix):
    return x @ W[prefix + ".weight"].T + W[prefix + ".bias"]


def gpt_forward(W, idx, n_head):
    B, T = idx.shape
    C = W["wte.weight"].shape[1]
    hd = C // n_head
    n_layer = len({name.split(".")[1] for name in W if name.startswith("h.")})
    x = W["wte.weight"][idx] + W["wpe.weight"][:T]
    future = torch.ones(T, T, dtype=torch.bool).triu(1)
    for i in range(n_layer):
        h = f"h.{i}."
        a = layer_norm(x, W[h + "ln_1.weight"], W[h + "ln_1.bias"])
        q, k, v = linear(a, W, h + "attn.c_attn").split(C, dim=-1)
        q, k, v = (t.reshape(B, T, n_head, hd).permute(0, 2, 1, 3) for t in (q, k, v))
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
        probs = torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1)
        y = (probs @ v).permute(0, 2, 1, 3).reshape(B, T, C)
        x = x + linear(y, W, h + "attn.c_proj")
        m = layer_norm(x, W[h + "ln_2.weight"], W[h + "ln_2.bias"])
        x = x + linear(gelu_tanh(linear(m, W, h + "mlp.c_fc")), W, h + "mlp.c_proj")
    x = layer_norm(x, W["ln_f.weight"], W["ln_f.bias"])
    return x @ W["wte.weight"].T


def mlp_forward(W, idx):
    # wte[idx], then layer.{i}: Linear(C, C) with tanh GELU after every layer but the last, then
    # the tied unembedding.
    n_layer = len({name.split(".")[1] for name in W if name.startswith("layer.")})
    x = W["wte.weight"][idx]
    for i in range(n_layer):
        x = linear(x, W, f"layer.{i}")
        if i + 1 < n_layer:
            x = gelu_tanh(x)
    return x @ W["wte.weight"].T


def cross_entropy(logits, targets):
    picked = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    return (torch.logsumexp(logits, dim=-1) - picked).mean()


def spec_parameters(L, C, V, T):
    params = [("wte.weight", [V, C]), ("wpe.weight", [T, C])]
    for i in range(L):
        h = f"h.{i}."
        params += [(h + "ln_1.weight", [C]), (h + "ln_1.bias", [C]),
                   (h + "attn.c_attn.weight", [3 * C, C]), (h + "attn.c_attn.bias", [3 * C]),
                   (h + "attn.c_proj.weight", [C, C]), (h + "attn.c_proj.bias", [C]),
                   (h + "ln_2.weight", [C]), (h + "ln_2.bias", [C]),
                   (h + "mlp.c_fc.weight", [4 * C, C]), (h + "mlp.c_fc.bias", [4 * C]),
                   (h + "mlp.c_proj.weight", [C, 4 * C]), (h + "mlp.c_proj.bias", [C])]
    return params + [("ln_f.weight", [C]), ("ln_f.bias", [C])]


def mlp_spec_parameters(L, C, V):
    params = [("wte.weight", [V, C])]
    for i in range(L):
        params += [(f"layer.{i}.weight", [C, C]), (f"layer.{i}.bias", [C])]
    return params


def spec_init(model, L, C, V, T, seed):
    g = torch.Generator()
    g.manual_seed(seed)
    out = {}
    names = spec_parameters(L, C, V, T) if model == "gpt" else mlp_spec_parameters(L, C, V)
    for name, shape in names:
        if name.endswith(".bias"):
            out[name] = torch.zeros(shape)
        elif name.split(".")[-2] in ("ln_1", "ln_2", "ln_f"):
            out[name] = torch.ones(shape)
        else:
            std = 0.02 / math.sqrt(2 * L) if name.endswith("c_proj.weight") else 0.02
            out[name] = torch.empty(shape, dtype=torch.float64).normal_(0.0, std, generator=g).float()
    return out


def main():
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    fwd = sub.add_parser("forward")
    fwd.add_argument("weights")
    fwd.add_argument("inputs")
    fwd.add_argument("out")
    fwd.add_argument("--model", choices=("gpt", "mlp"), default="gpt")
    fwd.add_argument("--n-head", type=int)
    ini = sub.add_parser("init")
    ini.add_argument("out")
    ini.add_argument("--model", choices=("gpt", "mlp"), default="gpt")
    for flag in ("--n-layer", "--n-embd", "--vocab-size", "--block-size", "--seed"):
        ini.add_argument(flag, type=int, required=True)
    args = parser.parse_args()
    if args.command == "forward":
        W = read_safetensors(args.weights)
        inputs = read_safetensors(args.inputs)
        if args.model == "gpt":
            if args.n_head is None:
                parser.error("forward --model gpt needs --n-head")
            logits = gpt_forward(W, inputs["idx"], args.n_head)
        else:
            logits = mlp_forward(W, inputs["idx"])
        loss = cross_entropy(logits, inputs["targets"])
        write_safetensors(args.out, {"logits": logits, "loss": loss})
    else:
        write_safetensors(args.out, spec_init(args.model, args.n_layer, args.n_embd, args.vocab_size, args.block_size,
                                              args.seed))


if __name__ == "__main__":
    main()
