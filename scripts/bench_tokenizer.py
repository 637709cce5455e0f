#!/usr/bin/env python3
"""Benchmark: accel's tokenizer against Hugging Face `tokenizers`, tokens per second on one core.

For each shape of tests/data/tokenizer_fixtures.py (gpt2, llama3, llama2, mistral), a tokenizer
trained in process (vocab --vocab), then --mb MB of generated documents (CJK, emoji, combining marks,
digits, whitespace runs, special tokens; another seed than the training text) as a jsonl file:
  accel    `accel tokenize DATA --format jsonl --tokenizer T --count`: the seconds spent in
           Tokenizer::encode over all documents (reading and JSON parsing excluded), one thread
  hf       Tokenizer.encode(doc, add_special_tokens=False) per document (one thread: encode is
           sequential; RAYON_NUM_THREADS=1 too), the same documents already in memory
Both are pinned to one core (taskset, where present); each figure is the best of --repeat runs, and
the two alternate, so a loaded machine slows both (the JSON records the load average).
Both produce the same ids (ctest tokenizer_parity_*); the token counts are printed as a check.
Prints a table and writes --json. It asserts nothing.

  ~/.cache/accel/venv-torch2.11/bin/python scripts/bench_tokenizer.py --json docs/bench/tokenizer_cpu_2core.json
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "data"))
os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import tokenizer_fixtures as fx  # noqa: E402


def pin(cmd):
    return (["taskset", "-c", "0"] + cmd) if shutil.which("taskset") else cmd


def accel_seconds(accel, tok, data, repeat):
    best = None
    for _ in range(repeat):
        out = subprocess.run(pin([accel, "tokenize", data, "--format", "jsonl", "--tokenizer", tok, "--count"]),
                             check=True, capture_output=True, text=True).stdout
        r = json.loads(out.strip().splitlines()[-1])
        best = r if best is None or r["seconds"] < best["seconds"] else best
    return best


def hf_seconds(tok, docs, repeat):
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {0})
    t = fx.Tokenizer.from_file(tok)
    best, tokens = None, 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        tokens = sum(len(t.encode(d, add_special_tokens=False).ids) for d in docs)
        s = time.perf_counter() - t0
        best = s if best is None else min(best, s)
    return best, tokens


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--accel", default=os.environ.get("ACCEL_BINARY", os.path.join(ROOT, "build", "accel")))
    ap.add_argument("--mb", type=float, default=4.0)
    ap.add_argument("--vocab", type=int, default=8000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--shapes", default=",".join(fx.SHAPES))
    ap.add_argument("--json")
    a = ap.parse_args()
    import tokenizers
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for shape in a.shapes.split(","):
            tok = os.path.join(tmp, f"{shape}.json")
            fx.write_tokenizer(shape, tok, vocab_size=a.vocab)
            docs = fx.generated_documents(int(a.mb * 1e6), seed=11, shape=shape)
            data = os.path.join(tmp, f"{shape}.jsonl")
            with open(data, "w", encoding="utf-8") as f:
                for d in docs:
                    f.write(json.dumps({"text": d}) + "\n")
            ours = accel_seconds(a.accel, tok, data, a.repeat)
            hf_s, hf_tokens = hf_seconds(tok, docs, a.repeat)
            row = {"shape": shape, "bytes": ours["bytes"], "documents": ours["documents"], "tokens": ours["tokens"],
                   "hf_tokens": hf_tokens, "accel_s": ours["seconds"], "hf_s": hf_s,
                   "accel_tokens_per_s": ours["tokens"] / ours["seconds"], "hf_tokens_per_s": hf_tokens / hf_s}
            row["ratio"] = row["accel_tokens_per_s"] / row["hf_tokens_per_s"]
            rows.append(row)
            print(f"{shape:8s} {row['bytes'] / 1e6:6.2f} MB {row['tokens']:9d} tokens  accel {row['accel_tokens_per_s'] / 1e6:6.2f} "
                  f"M tok/s  tokenizers {row['hf_tokens_per_s'] / 1e6:6.2f} M tok/s  accel/tokenizers {row['ratio']:5.2f}x"
                  + ("" if hf_tokens == ours["tokens"] else "  (token counts differ!)"), flush=True)
    result = {"what": "tokenizer throughput, one core: accel tokenize --count vs tokenizers Tokenizer.encode",
              "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                          "node": platform.node(), "load_average_1m_at_end": os.getloadavg()[0]},
              "tokenizers_version": tokenizers.__version__, "mb": a.mb, "vocab": a.vocab, "repeat": a.repeat,
              "results": rows}
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=2)
            f.write("\n")


if __name__ == "__main__":
    main()
