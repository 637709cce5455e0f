"""Text data through a Hugging Face tokenizer.json in the built-in trainer (ctest text_data).

A GPT-2-style byte-level BPE trained in the test by `tokenizers` (tests/data/tokenizer_fixtures.py),
a jsonl file of generated documents (unicode, whitespace runs, digits, special tokens in the text)
with the text under a non-default field, and a world-2 ddp run with data.kind text, data.format
jsonl, data.tokenizer. The same stream is built in Python -- per document [bos] encode(text,
add_special_tokens=False) [eos], bos/eos by the auto rule (here eos <|endoftext|> only: GPT-2's
one token is both) -- and written as an llm.c token file.
  - the cache accel built holds exactly Python's stream, so the first batch (sequential order,
    windows 0..3 at world 2 x micro 2) is Python's first 4 x 32 + 1 tokens;
  - a second run on that Python token file (data.kind tokens) has bit-identical losses at every
    step: the trainer read the same batches from the cache;
  - the launcher builds the cache before the workers start (they find it), and a later launch
    finds it instead of building it: one file in the cache directory;
  - a tokenizer.json with an unsupported pre-tokenizer stops the launch with exit 2 naming its
    JSON path, before any worker starts.
"""
import json
import os
import struct
import sys
import tempfile
import unittest

import trainer_test_support as ts

sys.path.insert(0, os.path.join(ts.ROOT, "tests", "data"))
import tokenizer_fixtures as fx  # noqa: E402

SEQ, MICRO, WORLD = 32, 2, 2


def write_llmc(path, tokens):
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, len(tokens), *([0] * 253)))
        f.write(struct.pack(f"<{len(tokens)}H", *tokens))


def read_llmc(path):
    with open(path, "rb") as f:
        header = struct.unpack("<256i", f.read(1024))
        body = f.read()
    assert header[0] == 20240520 and header[1] == 1 and header[2] * 2 == len(body), header[:3]
    return list(struct.unpack(f"<{header[2]}H", body))


class TextDataTraining(unittest.TestCase):
    def test_jsonl_run_at_world_2_trains_on_the_python_tokenizers_stream(self):
        with tempfile.TemporaryDirectory() as tmp:
            tok_path = fx.write_tokenizer("gpt2", os.path.join(tmp, "tokenizer.json"), vocab_size=1000)
            tok = fx.Tokenizer.from_file(tok_path)
            docs = fx.generated_documents(60_000, seed=3, shape="gpt2")
            with open(os.path.join(tmp, "docs.jsonl"), "w", encoding="utf-8") as f:
                for i, d in enumerate(docs):
                    f.write(json.dumps({"id": i, "body": d}) + "\n")
            eos = tok.token_to_id("<|endoftext|>")
            stream = []
            for d in docs:
                if d:
                    stream += tok.encode(d, add_special_tokens=False).ids + [eos]
            write_llmc(os.path.join(tmp, "python.bin"), stream)

            cache = os.path.join(tmp, "cache")
            base = ts.job(os.path.join(tmp, "run_text"), world=WORLD, micro=MICRO, steps=3, eval_every=0)
            base["model"]["vocab_size"] = 1024
            base["training"]["seq_len"] = SEQ
            text_job = dict(base, data={"kind": "text", "path": "docs.jsonl", "tokenizer": "tokenizer.json",
                                        "format": "jsonl", "field": "body", "cache_dir": cache})
            ts.write_job(os.path.join(tmp, "text.yaml"), text_job)
            p = ts.launch(os.path.join(tmp, "text.yaml"))
            self.assertEqual(p.returncode, 0, ts.describe(p))
            # The launcher builds the cache before the workers start; rank 0 then finds it.
            self.assertRegex(p.stderr, r"accel launch: .*docs.jsonl tokenized into .*cache/tokens-[0-9a-f-]+\.bin "
                                       rf"\({len(stream)} tokens from {sum(1 for d in docs if d)} documents\)")
            self.assertRegex(p.stdout + p.stderr, r"tokenized by '.*tokenizer.json' into .*\.bin \(found\)")
            bins = [n for n in os.listdir(cache) if n.endswith(".bin")]
            self.assertEqual(len(bins), 1, os.listdir(cache))  # built once: no second file, no staged leftover
            self.assertFalse([n for n in os.listdir(cache) if ".tmp." in n], os.listdir(cache))
            cached = read_llmc(os.path.join(cache, bins[0]))
            self.assertEqual(cached, stream)
            first_batch = WORLD * MICRO * SEQ + 1
            self.assertEqual(cached[:first_batch], stream[:first_batch])

            token_job = dict(base, data={"kind": "tokens", "path": "python.bin"})
            token_job["training"] = dict(base["training"], output_dir=os.path.join(tmp, "run_tokens"))
            ts.write_job(os.path.join(tmp, "tokens.yaml"), token_job)
            q = ts.launch(os.path.join(tmp, "tokens.yaml"))
            self.assertEqual(q.returncode, 0, ts.describe(q))
            a = [r["loss"] for r in ts.read_metrics(os.path.join(tmp, "run_text")) if "loss" in r]
            b = [r["loss"] for r in ts.read_metrics(os.path.join(tmp, "run_tokens")) if "loss" in r]
            self.assertEqual(len(a), 3)
            self.assertEqual(a, b)  # same batches, same program: bit-identical

            again = ts.launch(os.path.join(tmp, "text.yaml"),
                              sets=[f"training.output_dir={os.path.join(tmp, 'run_again')}"])
            self.assertEqual(again.returncode, 0, ts.describe(again))
            self.assertIn("token cache found at", again.stderr)
            self.assertEqual([n for n in os.listdir(cache) if n.endswith(".bin")], bins)


    def test_unsupported_tokenizer_exits_2_naming_the_json_path(self):
        with tempfile.TemporaryDirectory() as tmp:
            tok_path = fx.write_tokenizer("gpt2", os.path.join(tmp, "tokenizer.json"), vocab_size=300)
            with open(tok_path) as f:
                spec = json.load(f)
            spec["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": True}]}
            with open(tok_path, "w") as f:
                json.dump(spec, f)
            with open(os.path.join(tmp, "docs.txt"), "w") as f:
                f.write("one document\n")
            job = ts.job(os.path.join(tmp, "run"), world=2, steps=1)
            job["data"] = {"kind": "text", "path": "docs.txt", "tokenizer": "tokenizer.json",
                           "cache_dir": os.path.join(tmp, "cache")}
            ts.write_job(os.path.join(tmp, "job.yaml"), job)
            p = ts.launch(os.path.join(tmp, "job.yaml"))
            self.assertEqual(p.returncode, 2, ts.describe(p))
            self.assertIn("tokenizer.json: error: pre_tokenizer.pretokenizers[0].type: pre-tokenizer 'Digits' "
                          "is not implemented", p.stderr)
            self.assertFalse(os.path.exists(os.path.join(tmp, "run", "logs")))  # no worker started


if __name__ == "__main__":
    unittest.main()
