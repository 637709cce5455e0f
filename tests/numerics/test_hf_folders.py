"""Hugging Face model folders in and out of the built-in trainer (docs/huggingface.md, design 0031).

transformers builds a tiny random GPT2LMHeadModel inside the test (no hub) and saves it in three
safetensors shards by max_shard_size; accel trains from it (model.from_pretrained) and exports a
folder transformers loads back.

Tolerances (fp32):
- LOSS_TOL 1e-5 for accel's loss against transformers' on the same tokens and weights. The two
  compute the same function with other operation orders (fused vs separate bias adds, SDPA vs
  eager attention, another matmul blocking): each rounding is at most 2^-24 relative to values of
  order 1, and the loss (~5.5, ln 256) sits at the end of a chain of about 20 such operations per
  layer-free path (embedding sum, 2 x (layer norm, 2 matmuls, attention, 2 matmuls), final norm,
  log-softmax), so |d loss| <= ~20 * 6e-8 * 5.5 = 6.6e-6 < 1e-5. Measured: a few 1e-7. A transpose
  missed on the square attn.c_proj moves the loss by ~2.5e-3 (the issue's measurement): 250x the bound.
- The export is fp32 values moved, never computed, so transformers' logits from the exported folder
  after a run with lr 0 equal those of the folder the run started from exactly (bound 1e-6 as asked;
  measured 0). After real steps, transformers' loss over the held-out windows from the export equals
  accel's eval_loss of the same weights within LOSS_TOL (same reasoning as above).
"""
import glob
import json
import os
import shutil
import struct
import sys
import tempfile
import unittest

import trainer_test_support as ts

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
    import transformers
    from safetensors.torch import load_file
except ImportError as e:  # pragma: no cover - the project's venv has them
    raise unittest.SkipTest(f"transformers/torch not importable: {e}")

LOSS_TOL = 1e-5
LOGIT_TOL = 1e-6
SEQ = 32
GPT2 = dict(n_layer=2, n_head=4, n_embd=64, vocab_size=256, n_positions=SEQ)


def make_gpt2_folder(path, seed=0, shards=3, **overrides):
    """A random GPT2LMHeadModel saved by transformers in `shards` safetensors files."""
    torch.manual_seed(seed)
    cfg = transformers.GPT2Config(**{**GPT2, **overrides}, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = transformers.GPT2LMHeadModel(cfg).eval()
    total = sum(p.numel() * 4 for p in model.parameters())
    # Shards close before the tensor that would pass the limit: total/shards + slack gives `shards`.
    model.save_pretrained(path, max_shard_size=total // shards + 40000)
    return path


def read_tokens(path):
    with open(path, "rb") as f:
        header = struct.unpack("<256i", f.read(1024))
        n = header[2]
        return np.frombuffer(f.read(2 * n), dtype=np.uint16).astype(np.int64)


def windows(tokens, ks):
    rows = np.stack([tokens[k * SEQ:k * SEQ + SEQ + 1] for k in ks])
    return torch.from_numpy(rows[:, :-1]).contiguous(), torch.from_numpy(rows[:, 1:]).contiguous()


def hf_loss(folder, x, y):
    torch.set_num_threads(1)
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager",
                                                              dtype=torch.float32).eval()
    with torch.no_grad():
        logits = model(x).logits
    return float(F.cross_entropy(logits.reshape(-1, logits.size(-1)).double(), y.reshape(-1))), logits


def hf_job(tmp, name, folder, world, strategy, steps=1, lr=1e-3, micro=4, **training):
    out = os.path.join(tmp, name)
    j = ts.job(out, data_path=os.path.join(tmp, "tok.bin"), world=world, micro=micro, steps=steps, lr=lr, warmup=0,
               eval_every=steps, **training)
    del j["model"]  # every shape key comes from config.json
    j["model"] = {"from_pretrained": folder}
    j["training"]["seq_len"] = SEQ
    j["data"]["val_fraction"] = 0.1
    if strategy == "zero3":
        j["backend"] = "deepspeed"
        # Threshold 0: the tiny blocks are partitioned too (by default units under 100k values stay whole).
        j["deepspeed"] = {"zero_stage": 3, "stage3_param_persistence_threshold": 0}
    elif strategy == "full_shard":
        j["backend"] = "fsdp"
        j["fsdp"] = {"sharding_strategy": "FULL_SHARD"}
    path = ts.write_job(os.path.join(tmp, name + ".yaml"), j)
    return path, out


def run_hf_job(test, tmp, name, folder, world, strategy, **kw):
    """Launches hf_job(...) and asserts it succeeded; returns (output_dir, process)."""
    path, out = hf_job(tmp, name, folder, world, strategy, **kw)
    p = ts.launch(path)
    test.assertEqual(p.returncode, 0, ts.describe(p))
    return out, p


def edit_folder(path, edit_tensors=None, edit_config=None):
    """Rewrites a one-file folder's tensors and/or config.json through the given editors."""
    if edit_tensors:
        from safetensors.torch import save_file
        tensors = load_file(os.path.join(path, "model.safetensors"))
        edit_tensors(tensors)
        save_file(tensors, os.path.join(path, "model.safetensors"), metadata={"format": "pt"})
    if edit_config:
        with open(os.path.join(path, "config.json")) as f:
            cfg = json.load(f)
        edit_config(cfg)
        with open(os.path.join(path, "config.json"), "w") as f:
            json.dump(cfg, f)
    return path


def expect_exit_2(test, tmp, folder, *needles, sets=()):
    """A world-1 job from `folder` exits 2 at load, its stderr naming every needle."""
    job_path, _ = hf_job(tmp, os.path.basename(folder), folder, 1, "ddp")
    p = ts.launch(job_path, sets=sets)
    test.assertEqual(p.returncode, 2, ts.describe(p))
    for needle in needles:
        test.assertIn(needle, p.stderr)
    print(p.stderr.strip().splitlines()[0][:200])


def report(out, rank):
    with open(os.path.join(out, "report", f"rank_{rank}.json")) as f:
        return json.load(f)


def tensor_bytes(folder, skip=("lm_head.weight",)):
    """Data bytes of the tensors accel reads from a folder."""
    total = 0
    for f in glob.glob(os.path.join(folder, "*.safetensors")):
        with open(f, "rb") as fh:
            n = struct.unpack("<Q", fh.read(8))[0]
            header = json.loads(fh.read(n))
        for name, e in header.items():
            if name != "__metadata__" and name not in skip and not name.endswith((".attn.bias", ".attn.masked_bias")):
                total += e["data_offsets"][1] - e["data_offsets"][0]
    return total


class Gpt2FromPretrained(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="accel_hf_")
        cls.folder = make_gpt2_folder(os.path.join(cls.tmp, "gpt2"))
        cls.tokens_path = ts.make_tokens(os.path.join(cls.tmp, "tok.bin"), n=20000, vocab=256)
        cls.tokens = read_tokens(cls.tokens_path)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def run_job(self, name, world, strategy, **kw):
        return run_hf_job(self, self.tmp, name, self.folder, world, strategy, **kw)[0]

    def test_folder_is_three_shards(self):
        files = sorted(os.path.basename(f) for f in glob.glob(os.path.join(self.folder, "*.safetensors")))
        self.assertEqual(len(files), 3, files)
        self.assertTrue(os.path.exists(os.path.join(self.folder, "model.safetensors.index.json")))

    def test_first_loss_matches_transformers_and_ranks_read_their_slices(self):
        rows = 12  # the global batch: step 0 reads windows 0 .. 11 (sequential order)
        x, y = windows(self.tokens, range(rows))
        ref, _ = hf_loss(self.folder, x, y)
        total = tensor_bytes(self.folder)
        for strategy, w in (("ddp", 1), ("zero3", 2), ("full_shard", 3)):
            with self.subTest(strategy=strategy, world=w):
                out = self.run_job(f"first_{strategy}", w, strategy, micro=rows // w)
                loss = ts.read_metrics(out)[0]["loss"]
                print(f"{strategy} world {w}: accel {loss:.9f} transformers {ref:.9f} |d| {abs(loss - ref):.2e}")
                self.assertLessEqual(abs(loss - ref), LOSS_TOL)
                read = [report(out, r)["pretrained_bytes_read"] for r in range(w)]
                expected = [slice_bytes(strategy, w, r) for r in range(w)]
                print(f"  bytes read per rank {read}, their slices {expected}, the folder's tensors {total}")
                self.assertEqual(read, expected)

    def test_export_reloads_in_transformers(self):
        # lr 0: the weights leave as they came; the export's logits equal the source folder's.
        out = self.run_job("export_lr0", 2, "zero3", lr=0.0, export_format="hf", export_max_shard_size=150000)
        exported = os.path.join(out, "hf")
        shards = glob.glob(os.path.join(exported, "model-*.safetensors"))
        self.assertGreaterEqual(len(shards), 3, "exported above max_shard_size: sharded with an index")
        x, y = windows(self.tokens, range(8))
        _, source_logits = hf_loss(self.folder, x, y)
        _, export_logits = hf_loss(exported, x, y)
        d = (source_logits - export_logits).abs().max().item()
        print(f"export (lr 0) logits vs source folder: max |d| {d:.2e}")
        self.assertLessEqual(d, LOGIT_TOL)
        # After training: transformers' held-out loss from the export equals accel's eval_loss.
        out = self.run_job("export_trained", 2, "zero3", steps=4, lr=3e-3, export_format="hf")
        evals = [r["eval_loss"] for r in ts.read_metrics(out) if "eval_loss" in r]
        n = ts_num_windows(len(self.tokens))
        n_val = -(-n // 10)
        xv, yv = windows(self.tokens, range(n - n_val, n))
        loss, _ = hf_loss(os.path.join(out, "hf"), xv, yv)
        print(f"trained export: accel eval_loss {evals[-1]:.9f} transformers {loss:.9f} |d| {abs(loss - evals[-1]):.2e}")
        self.assertLessEqual(abs(loss - evals[-1]), LOSS_TOL)
        # merge-weights --format hf of the zero-3 checkpoint the run ended with equals the export.
        merged = os.path.join(self.tmp, "merged_hf")
        p = ts.run([ts.ACCEL, "merge-weights", out, "--format", "hf", "-o", merged])
        self.assertEqual(p.returncode, 0, ts.describe(p))
        with open(os.path.join(merged, "config.json")) as a, open(os.path.join(out, "hf", "config.json")) as b:
            self.assertEqual(json.load(a), json.load(b))
        mine = {}
        for f in glob.glob(os.path.join(merged, "*.safetensors")):
            mine.update(load_file(f))
        theirs = {}
        for f in glob.glob(os.path.join(out, "hf", "*.safetensors")):
            theirs.update(load_file(f))
        self.assertEqual(sorted(mine), sorted(theirs))
        for k in mine:
            self.assertTrue(torch.equal(mine[k], theirs[k]), k)


def slice_bytes(strategy, world, rank, stored_bytes=4):
    """The bytes rank `rank` keeps of the tiny GPT-2 (fp32 folder), so reads: the whole model
    without partitioning; under zero 3 / FULL_SHARD the root unit whole (wte, wpe, ln_f: the root
    every rank keeps) and, of each block unit, its part of the flat buffer padded to a multiple of
    the world (docs/design/0023): elements [r p / W, (r+1) p / W) of the block's n, p = ceil(n / W) W."""
    C, V, T, L = GPT2["n_embd"], GPT2["vocab_size"], GPT2["n_positions"], GPT2["n_layer"]
    root = V * C + T * C + 2 * C
    block = 12 * C * C + 13 * C
    if strategy == "ddp":
        return stored_bytes * (root + L * block)
    p = -(-block // world) * world
    lo, hi = rank * p // world, min((rank + 1) * p // world, block)
    return stored_bytes * (root + L * max(0, hi - lo))


def ts_num_windows(n_tokens):
    return (n_tokens - 1) // SEQ


class BadFolders(unittest.TestCase):
    """Each defect is exit 2 at job load, naming every offending tensor (or key) and its file."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="accel_hf_bad_")
        ts.make_tokens(os.path.join(cls.tmp, "tok.bin"), n=5000, vocab=256)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def folder(self, name, edit_tensors=None, edit_config=None):
        return edit_folder(make_gpt2_folder(os.path.join(self.tmp, name), shards=1), edit_tensors, edit_config)

    def expect_exit_2(self, folder, *needles):
        expect_exit_2(self, self.tmp, folder, *needles)

    def test_missing_tensor(self):
        def drop(t):
            del t["transformer.h.1.attn.c_proj.weight"]
            del t["transformer.ln_f.bias"]
        self.expect_exit_2(self.folder("missing", drop), "missing tensor 'transformer.h.1.attn.c_proj.weight'",
                           "missing tensor 'transformer.ln_f.bias'", "model.safetensors")

    def test_extra_tensor(self):
        def add(t):
            t["transformer.h.2.ln_1.weight"] = torch.ones(64)
        self.expect_exit_2(self.folder("extra", add), "extra tensor 'transformer.h.2.ln_1.weight' in model.safetensors")

    def test_wrong_shape(self):
        def reshape(t):
            t["transformer.h.0.mlp.c_fc.weight"] = t["transformer.h.0.mlp.c_fc.weight"].t().contiguous()
        self.expect_exit_2(self.folder("shape", reshape),
                           "tensor 'transformer.h.0.mlp.c_fc.weight' in model.safetensors has shape [256, 64]")

    def test_unknown_architecture(self):
        def arch(c):
            c["architectures"] = ["GPTNeoXForCausalLM"]
        self.expect_exit_2(self.folder("arch", edit_config=arch), "GPTNeoXForCausalLM", "GPT2LMHeadModel")

    def test_math_changing_key(self):
        def eps(c):
            c["layer_norm_epsilon"] = 1e-6
        self.expect_exit_2(self.folder("eps", edit_config=eps), '"layer_norm_epsilon"')


if __name__ == "__main__":
    unittest.main()
