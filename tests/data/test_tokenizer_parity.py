"""accel's tokenizer against Hugging Face `tokenizers` (ctest tokenizer_parity_<shape>).

For each shape of tokenizer_fixtures.py (gpt2, llama3, llama2, mistral), a tokenizer trained in
process on generated text, then at least 1 MB of *other* generated text (a different seed: CJK,
emoji, combining marks, whitespace runs, digits, the shape's special tokens written in the text) cut
into documents, encoded by both: `accel tokenize --print-ids` and Tokenizer.encode_batch(...,
add_special_tokens=False). The ids must be identical, document by document; the first differing
document is printed with both id lists around the difference. Exact equality is the only tolerance:
tokenization is integer work with one right answer.
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tokenizer_fixtures as fx  # noqa: E402

ACCEL = os.environ.get("ACCEL_BINARY", "accel")
MIN_BYTES = 1_000_000


def accel_ids(tokenizer_path, jsonl_path):
    out = subprocess.run([ACCEL, "tokenize", jsonl_path, "--format", "jsonl", "--tokenizer", tokenizer_path,
                          "--print-ids"], check=True, capture_output=True, text=True).stdout
    return [[int(t) for t in line.split()] for line in out.splitlines()]


def first_difference(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def assert_same_ids(test, label, tok_path, docs, tmp):
    data = os.path.join(tmp, "docs.jsonl")
    with open(data, "w", encoding="utf-8") as f:
        for d in docs:
            f.write(json.dumps({"text": d}) + "\n")
    hf = [e.ids for e in fx.Tokenizer.from_file(tok_path).encode_batch(docs, add_special_tokens=False)]
    ours = accel_ids(tok_path, data)
    test.assertEqual(len(ours), len(docs))
    for i, (a, b) in enumerate(zip(ours, hf)):
        if a != b:
            k = first_difference(a, b)
            test.fail(f"{label}: document {i} differs at id {k}:\n  text {docs[i]!r}\n"
                      f"  accel {a[max(0, k - 5):k + 10]}\n  hf    {b[max(0, k - 5):k + 10]}")
    return sum(map(len, hf))


class ParityBase:
    shape = None

    def test_ids_identical_on_a_megabyte(self):
        with tempfile.TemporaryDirectory() as tmp:
            tok_path = os.path.join(tmp, "tokenizer.json")
            fx.write_tokenizer(self.shape, tok_path)
            docs = fx.generated_documents(MIN_BYTES, seed=7, shape=self.shape)
            self.assertGreaterEqual(sum(len(d.encode()) for d in docs), MIN_BYTES)
            specials = {t: sum(d.count(t) for d in docs) for t in fx.SPECIALS[self.shape]}
            self.assertTrue(all(n > 0 for n in specials.values()), specials)  # the text does exercise them
            n = assert_same_ids(self, self.shape, tok_path, docs, tmp)
            print(f"{self.shape}: {len(docs)} documents, {n} ids identical", file=sys.stderr)


class Gpt2(ParityBase, unittest.TestCase):
    shape = "gpt2"


class Llama3(ParityBase, unittest.TestCase):
    shape = "llama3"


class Llama2(ParityBase, unittest.TestCase):
    shape = "llama2"


class Mistral(ParityBase, unittest.TestCase):
    shape = "mistral"


class Variants(unittest.TestCase):
    """The settings the four shapes leave out, each on 300 KB: ByteLevel's add_prefix_space, Metaspace's
    always and never schemes with split, and the NFKC and NFD normalizers."""

    def test_other_settings_identical(self):
        from tokenizers import normalizers, pre_tokenizers
        variants = [
            ("gpt2", "ByteLevel add_prefix_space", lambda t: setattr(t, "pre_tokenizer", pre_tokenizers.ByteLevel(add_prefix_space=True))),
            ("mistral", "Metaspace always, split", lambda t: setattr(t, "pre_tokenizer", pre_tokenizers.Metaspace(
                replacement="\u2581", prepend_scheme="always", split=True))),
            ("mistral", "Metaspace never, split", lambda t: setattr(t, "pre_tokenizer", pre_tokenizers.Metaspace(
                replacement="\u2581", prepend_scheme="never", split=True))),
            ("gpt2", "NFKC", lambda t: setattr(t, "normalizer", normalizers.NFKC())),
            ("gpt2", "NFD", lambda t: setattr(t, "normalizer", normalizers.NFD())),
        ]
        for shape, label, change in variants:
            with self.subTest(label), tempfile.TemporaryDirectory() as tmp:
                tok = fx.train_tokenizer(shape)
                change(tok)
                tok_path = os.path.join(tmp, "tokenizer.json")
                tok.save(tok_path)
                assert_same_ids(self, label, tok_path, fx.generated_documents(300_000, seed=5, shape=shape), tmp)


if __name__ == "__main__":
    unittest.main()
