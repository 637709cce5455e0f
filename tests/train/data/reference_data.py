#!/usr/bin/env python3
"""Independent Python reference for accel's data layer (trainer/data), used by test_data.

It re-implements, from their documented definitions only:
  - llm.c token files (read the way llm.c's train_gpt2.py does, with numpy): 256 little-endian int32
    header [magic 20240520, version 1, N, 0...] then N little-endian uint16 tokens;
  - splitmix64, stream_key and below() (trainer/data/splitmix.hpp);
  - the synthetic token stream (synthetic_tokens.hpp);
  - the shuffled order's per-epoch Fisher-Yates permutation (sample_order.hpp).

Usage (exit status 0 when the file matches, 1 with a message otherwise):
  reference_data.py token-file FILE EXPECTED.txt   tokens of FILE == whitespace-separated EXPECTED
  reference_data.py synthetic FILE SEED VOCAB      FILE holds the first N synthetic tokens
  reference_data.py permutation FILE SEED EPOCH    FILE holds epoch_permutation(SEED, EPOCH, N)
"""
import sys

import numpy as np

MASK = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15
TAG_SYNTHETIC_SUCCESSORS, TAG_SYNTHETIC_TOKENS, TAG_SHUFFLE_EPOCH = 1, 2, 3
SYNTHETIC_TOKENS, SUCCESSORS, FOLLOW_NUM, FOLLOW_DEN = 1 << 20, 4, 7, 8


def mix64(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def stream_key(seed, tag, index):
    return mix64((mix64((seed + tag * GOLDEN) & MASK) + index) & MASK)


def below(x, n):
    return (x * n) >> 64


class SplitMix64:
    def __init__(self, key):
        self.state = key

    def next(self):
        self.state = (self.state + GOLDEN) & MASK
        return mix64(self.state)


def synthetic_tokens(seed, vocab, count=SYNTHETIC_TOKENS):
    table = SplitMix64(stream_key(seed, TAG_SYNTHETIC_SUCCESSORS, 0))
    succ = [table.next() for _ in range(vocab * SUCCESSORS)]
    succ = [below(x, vocab) for x in succ]
    rng = SplitMix64(stream_key(seed, TAG_SYNTHETIC_TOKENS, 0))
    out = []
    for i in range(count):
        a, b = rng.next(), rng.next()
        if i > 0 and below(a, FOLLOW_DEN) < FOLLOW_NUM:
            out.append(succ[out[-1] * SUCCESSORS + below(b, SUCCESSORS)])
        else:
            out.append(below(b, vocab))
    return out


def epoch_permutation(seed, epoch, n):
    perm = list(range(n))
    rng = SplitMix64(stream_key(seed, TAG_SHUFFLE_EPOCH, epoch))
    for j in range(n - 1, 0, -1):
        k = below(rng.next(), j + 1)
        perm[j], perm[k] = perm[k], perm[j]
    return perm


def read_token_file(path):
    """As llm.c's train_gpt2.py _peek_data_shard/_load_data_shard, plus an exact size check."""
    with open(path, "rb") as f:
        header = np.frombuffer(f.read(256 * 4), dtype="<i4")
        assert len(header) == 256, f"{path}: short header"
        assert header[0] == 20240520, f"{path}: magic {header[0]}"
        assert header[1] == 1, f"{path}: version {header[1]}"
        assert not header[3:].any(), f"{path}: reserved header ints are not zero"
        ntok = int(header[2])
        tokens = np.frombuffer(f.read(), dtype="<u2")
    assert len(tokens) == ntok, f"{path}: header says {ntok} tokens, file holds {len(tokens)}"
    return tokens


def main(argv):
    mode, path = argv[1], argv[2]
    tokens = read_token_file(path).tolist()
    if mode == "token-file":
        with open(argv[3]) as f:
            expected = [int(t) for t in f.read().split()]
    elif mode == "synthetic":
        expected = synthetic_tokens(int(argv[3]), int(argv[4]), len(tokens))
    elif mode == "permutation":
        expected = epoch_permutation(int(argv[3]), int(argv[4]), len(tokens))
    else:
        raise SystemExit(f"unknown mode {mode}")
    if tokens != expected:
        bad = next(i for i, (a, b) in enumerate(zip(tokens + [None], expected + [None])) if a != b)
        print(f"{mode}: mismatch at position {bad}: file {tokens[bad:bad + 4]} reference {expected[bad:bad + 4]}")
        return 1
    print(f"{mode}: {len(tokens)} tokens match")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
