"""llm.c token files and the spec's sequential batch order.

File format: 256 little-endian int32 header (magic 20240520, version 1, token count, rest zero),
then `count` little-endian uint16 tokens.

Windows: window k covers tokens [k*T, k*T + T + 1); x = first T, y = last T. A file of N tokens
has n = (N - 1) // T whole windows. With val_fraction f > 0 the last ceil(f * n) windows are held
out for evaluation and the first n_train = n - ceil(f * n) are the training windows; the training
row b of rank r at micro-step m of step s is window ((s*G + m)*W + r)*B + b mod n_train.
"""
from __future__ import annotations

import math
import struct
from typing import TYPE_CHECKING, List, Tuple

import numpy as np

if TYPE_CHECKING:  # imported where used (TokenWindows.windows)
    import torch

MAGIC = 20240520
VERSION = 1
HEADER_INTS = 256
HEADER_BYTES = HEADER_INTS * 4


class TokenFileError(ValueError):
    pass


def write_tokens(path: str, tokens) -> None:
    toks = np.asarray(tokens)
    if toks.size and (toks.min() < 0 or toks.max() > 65535):
        raise TokenFileError("tokens must fit in uint16")
    header = np.zeros(HEADER_INTS, dtype="<i4")
    header[0], header[1], header[2] = MAGIC, VERSION, toks.size
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(toks.astype("<u2").tobytes())


def read_tokens(path: str) -> np.ndarray:
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < HEADER_BYTES:
        raise TokenFileError(f"{path}: {len(data)} bytes, shorter than the 1024-byte header")
    magic, version, count = struct.unpack_from("<3i", data, 0)
    if magic != MAGIC:
        raise TokenFileError(f"{path}: magic {magic}, expected {MAGIC} (not an llm.c token file)")
    if version != VERSION:
        raise TokenFileError(f"{path}: version {version}, expected {VERSION}")
    if count < 0 or len(data) < HEADER_BYTES + 2 * count:
        raise TokenFileError(f"{path}: header says {count} tokens but the file holds "
                             f"{(len(data) - HEADER_BYTES) // 2}")
    return np.frombuffer(data, dtype="<u2", count=count, offset=HEADER_BYTES).astype(np.int64)


def read_text_as_tokens(path: str) -> np.ndarray:
    """data.kind text: the file's bytes are the tokens (vocab 256)."""
    with open(path, "rb") as f:
        return np.frombuffer(f.read(), dtype=np.uint8).astype(np.int64)


def num_windows(num_tokens: int, seq_len: int) -> int:
    return max(0, (num_tokens - 1) // seq_len)


def split_windows(n: int, val_fraction: float) -> Tuple[int, int]:
    """(n_train, n_val): the last ceil(val_fraction * n) windows are held out when val_fraction > 0."""
    if not (0.0 <= val_fraction < 1.0):
        raise ValueError(f"val_fraction {val_fraction} not in [0, 1)")
    n_val = int(math.ceil(val_fraction * n)) if val_fraction > 0 else 0
    return n - n_val, n_val


def window_index(s: int, m: int, r: int, b: int, W: int, B: int, G: int, n_train: int) -> int:
    return (((s * G + m) * W + r) * B + b) % n_train


def micro_batch_windows(s: int, m: int, r: int, W: int, B: int, G: int, n_train: int) -> List[int]:
    return [window_index(s, m, r, b, W, B, G, n_train) for b in range(B)]


class TokenWindows:
    """Training and held-out windows over one token stream."""

    def __init__(self, tokens: np.ndarray, seq_len: int, val_fraction: float):
        self.tokens = np.ascontiguousarray(tokens, dtype=np.int64)
        self.T = seq_len
        self.n = num_windows(len(self.tokens), seq_len)
        self.n_train, self.n_val = split_windows(self.n, val_fraction)
        if self.n_train < 1:
            raise ValueError(f"{len(self.tokens)} tokens give {self.n} windows of seq_len {seq_len}, "
                             f"{self.n_val} held out: no training window left")

    def windows(self, ks: List[int]) -> Tuple[torch.Tensor, torch.Tensor]:
        # torch is imported here, not with the module, so that writing or reading a token file
        # (make_tokens.py, the tests' fixtures) costs no torch import (about 2 s of CPU).
        import torch

        T = self.T
        x = np.stack([self.tokens[k * T: k * T + T] for k in ks])
        y = np.stack([self.tokens[k * T + 1: k * T + T + 1] for k in ks])
        return torch.from_numpy(x), torch.from_numpy(y)

    def train_batch(self, s: int, m: int, r: int, W: int, B: int, G: int):
        return self.windows(micro_batch_windows(s, m, r, W, B, G, self.n_train))

    def val_window_ids(self) -> List[int]:
        return list(range(self.n_train, self.n))
