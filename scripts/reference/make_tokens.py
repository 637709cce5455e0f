#!/usr/bin/env python3
"""Write an llm.c token file (header: 256 int32, magic 20240520, version 1, count; then uint16 tokens).

Generators (all deterministic from --seed, through splitmix64 so no library RNG version matters):
  markov   (default) an order-1 Markov chain: every token v has --branch successors drawn once from
           the seed; each next token is one of them, uniformly. Learnable: the best possible loss is
           ln(branch) against ln(vocab) for a model that knows nothing.
  cycle    a random sequence of --period tokens, repeated. Very learnable (loss -> 0).
  uniform  i.i.d. uniform tokens. Not learnable (loss stays at ln(vocab)).
  --text FILE writes the bytes of FILE as tokens (vocab 256), like accel's data.kind text.

Examples:
  make_tokens.py --out /tmp/t.bin --n 100000 --vocab 256 --seed 1
  make_tokens.py --out /tmp/t.bin --kind cycle --period 97 --n 20000 --vocab 64
  make_tokens.py --out /tmp/shakespeare.bin --text input.txt
"""
from __future__ import annotations

import argparse
import math
import os
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

import token_data  # noqa: E402

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def splitmix64(seed: int, n: int) -> np.ndarray:
    """The first n outputs of splitmix64 started from state `seed` (vectorised, uint64)."""
    with np.errstate(over="ignore"):
        state = np.uint64(seed & 0xFFFFFFFFFFFFFFFF) + (np.arange(1, n + 1, dtype=np.uint64) * _GOLDEN)
        z = state
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def generate(kind: str, n: int, vocab: int, seed: int, branch: int = 4, period: int = 97) -> np.ndarray:
    if not (2 <= vocab <= 65536):
        raise ValueError("vocab must be in [2, 65536]")
    if kind == "uniform":
        return (splitmix64(seed, n) % np.uint64(vocab)).astype(np.int64)
    if kind == "cycle":
        base = (splitmix64(seed, period) % np.uint64(vocab)).astype(np.int64)
        return np.resize(base, n)
    if kind == "markov":
        succ = (splitmix64(seed ^ 0x5DEECE66D, vocab * branch) % np.uint64(vocab)).astype(np.int64)
        succ = succ.reshape(vocab, branch).tolist()
        choice = (splitmix64(seed, n) % np.uint64(branch)).astype(np.int64).tolist()
        out = [0] * n
        cur = int(splitmix64(seed ^ 0xABCDEF, 1)[0] % np.uint64(vocab))
        for i in range(n):
            out[i] = cur
            cur = succ[cur][choice[i]]
        return np.asarray(out, dtype=np.int64)
    raise ValueError(f"unknown kind {kind!r}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="Write an llm.c token file for fixtures.")
    p.add_argument("--out", required=True, help="output .bin path")
    p.add_argument("--n", type=int, default=100_000, help="number of tokens (100000)")
    p.add_argument("--vocab", type=int, default=256, help="vocabulary size (256)")
    p.add_argument("--seed", type=int, default=1337, help="generator seed (1337)")
    p.add_argument("--kind", choices=["markov", "cycle", "uniform"], default="markov")
    p.add_argument("--branch", type=int, default=4, help="markov: successors per token (4)")
    p.add_argument("--period", type=int, default=97, help="cycle: period (97)")
    p.add_argument("--text", help="write the bytes of this file as tokens instead (vocab 256)")
    a = p.parse_args(argv)
    if a.text:
        with open(a.text, "rb") as f:
            toks = np.frombuffer(f.read(), dtype=np.uint8).astype(np.int64)
        desc = f"bytes of {a.text}"
    else:
        toks = generate(a.kind, a.n, a.vocab, a.seed, a.branch, a.period)
        desc = f"{a.kind} vocab {a.vocab} seed {a.seed}"
        if a.kind == "markov":
            desc += f", branch {a.branch} (loss floor ln {a.branch} = {math.log(a.branch):.4f})"
    token_data.write_tokens(a.out, toks)
    print(f"wrote {a.out}: {len(toks)} tokens ({desc}); ln(vocab) = {math.log(max(2, a.vocab if not a.text else 256)):.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
