"""accel's llama model family against transformers' LlamaForCausalLM (issue 47; docs/models.md).

    ACCEL_BINARY=build/accel PYTHONDONTWRITEBYTECODE=1 \
        scripts/python -m unittest discover -s tests/numerics -p test_llama.py -v

LlamaParity: tiny random LlamaForCausalLM models built in process (no hub), their weights saved
under accel's names, one forward through accel (tests/tools/accel_model_forward, the trainer's own
module) on the same tokens: logits and the first loss against transformers'. Cases: grouped-query
attention with rope_theta 500000 and an untied head; the same with Llama 3.1's rope scaling (the
original context short enough that all three frequency bands occur); biases on every projection with
a tied head, one key/value head and a head_dim that is not n_embd / n_head; and multi-head Llama 2.

Bounds (fp32). The truth is transformers' forward in float64 on the same weights. accel and
transformers compute the same ops in float32 with their own rounding (matmul blocking, the order of
a reduction), so each deviates from the truth by rounding of the same size: accel's deviation may be
at most FACTOR times transformers' own (its measured fp32 noise), at least FLOOR_ULPS ulps of the
largest logit; and accel's logits must also be within the issue's goal, 1e-5, of transformers' fp32
ones. A wrong rotation convention, a swapped norm or a misplaced tensor moves logits by O(0.1) with
these unit-size weights, 10^4 times the bounds (the commit that added this test planted one).

The loss: cross-entropy moves by at most twice the largest logit change (the gradient of one
row's loss in its logits, softmax - onehot, has an L1 norm below 2), so accel's loss may be 2 x the
logits' bound from the float64 loss, plus 4 float32 ulps of its own rounding.

Bounds (bf16). Both run the model in bf16 (weights rounded to bf16, the same rounding points: RoPE
tables rounded to bf16, RMSNorm and softmax in float32, matmuls rounding their outputs to bf16), so
again each deviates from the float64 truth by bf16 rounding (unit roundoff 2^-8, compounded over the
layers); accel's deviation may be at most FACTOR times transformers' own bf16 deviation. No fixed
bf16 bound is asserted between the two: their difference is two independent bf16 roundings, whose
size is the measured deviation, not a constant.

LlamaFineTune: 20 steps at world 2 under ddp, deepspeed zero 3, zero 3 with the optimizer and the
parameters offloaded to the CPU, and fsdp FULL_SHARD, from the same transformers-initialized weights
(training.init_from) on the same token file, against a plain transformers + torch loop
(llama_hf.hf_train: the spec's batches, torch.optim.AdamW, schedule and clipping). Bounds come from
the reference's own reordering noise (reordering_noise.py): the loop run again in other groupings of
the same global batch (micro 2 x accumulation 4, micro 4 x accumulation 2); each accel run's
losses, grad norms and final weights must be within FACTOR x that noise of the reference, so the four
strategies agree with the loop and with each other; planted bugs (gradients 1% off, shards swapped)
must miss the bounds by 100x.
"""
import os
import sys
import tempfile
import unittest

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import llama_hf as hf  # noqa: E402
import trainer_test_support as ts  # noqa: E402
from api_test_support import read_safetensors, read_safetensors_arrays  # noqa: E402
from reordering_noise import FLOOR_ULPS, Run, check_controls, derive, differences, row  # noqa: E402

# Two fp32 (or bf16) implementations of the same ops: each one's error against the float64 truth is
# rounding of the same size; measured ratios (accel / transformers) are printed by each case.
# 4 leaves room for another CPU's kernels and is far below what a semantic error does (10^4).
FACTOR = 4
GOAL_FP32 = 1e-5  # the parity goal for fp32 logits

CASES = {
    "gqa_theta500k_untied": hf.shape(),
    "llama3_rope_scaling": hf.shape(head_dim=16, block=128, llama3=(8.0, 1.0, 4.0, 64)),
    "biases_tied_mqa_head_dim24": hf.shape(n_kv_head=1, head_dim=24, tied=True, attention_bias=True, mlp_bias=True),
    "llama2_mha_theta1e4": hf.shape(n_kv_head=4, theta=10000.0, eps=1e-6),
}
BATCH, SEQ = 2, 48


def accel_forward(tmp, name, m, weights, idx, targets, dtype="fp32"):
    """accel's logits and loss for `idx` from the weights file `weights` (accel_model_forward)."""
    job = ts.write_job(os.path.join(tmp, name + ".yaml"), {"model": dict(m, dtype=dtype), "device": "cpu",
                                                                 "training": {"seq_len": idx.shape[1]}})
    inputs = os.path.join(tmp, name + "_in.safetensors")
    hf.safetensors_io.save_file({"idx": idx, "targets": targets}, inputs)
    out = os.path.join(tmp, name + "_out.safetensors")
    p = ts.run([hf.FORWARD_TOOL, job, weights, inputs, out])
    if p.returncode != 0:
        raise AssertionError(f"accel_model_forward {name}: {ts.describe(p)}")
    got = read_safetensors(out)
    return got["logits"].double(), float(got["loss"])


class LlamaParity(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls._tmp = tempfile.TemporaryDirectory(prefix="accel_llama_parity_")

    @classmethod
    def tearDownClass(cls):
        cls._tmp.cleanup()

    def _case(self, name, dtype):
        m = CASES[name]
        model = hf.hf_model(m, seed=7, spread=True)
        g = torch.Generator().manual_seed(11)
        idx = torch.randint(0, m["vocab_size"], (BATCH, SEQ), generator=g)
        targets = torch.randint(0, m["vocab_size"], (BATCH, SEQ), generator=g)
        weights = hf.save_accel_weights(model, os.path.join(self._tmp.name, name + ".safetensors"))
        torch_dtype = torch.float32 if dtype == "fp32" else torch.bfloat16
        with torch.no_grad():
            truth = model.double()(input_ids=idx).logits
            theirs = model.to(torch_dtype)(input_ids=idx).logits.double()
        ours, our_loss = accel_forward(self._tmp.name, f"{name}_{dtype}", m, weights, idx, targets, dtype)
        truth_loss = float(hf.token_loss(truth, targets))
        their_loss = float(hf.token_loss(theirs, targets))
        # The floor: FLOOR_ULPS spacings of the largest logit in the compared dtype.
        eps = float(np.finfo(np.float32).eps) if dtype == "fp32" else 2.0 ** -7
        floor = FLOOR_ULPS * eps * float(truth.abs().max())
        their_err = float((theirs - truth).abs().max())
        our_err = float((ours - truth).abs().max())
        bound = max(FACTOR * their_err, floor)
        between = float((ours - theirs).abs().max())
        # The mean token cross-entropy moves by at most 2 x the largest logit change (its gradient in
        # one row's logits, softmax - onehot, has an L1 norm below 2), plus its own float32 rounding.
        loss_our_err = abs(our_loss - truth_loss)
        loss_bound = 2 * bound + FLOOR_ULPS * float(np.finfo(np.float32).eps) * truth_loss
        print(f"\n[{name} {dtype}] logits |max| {float(truth.abs().max()):.3f}: accel vs float64 {our_err:.3g}, "
              f"transformers vs float64 {their_err:.3g} (ratio {our_err / max(their_err, 1e-300):.2f}), bound "
              f"{bound:.3g}; accel vs transformers {between:.3g}; loss {our_loss:.7f} vs {their_loss:.7f} "
              f"(error vs float64 {loss_our_err:.3g} / bound {loss_bound:.3g})")
        self.assertLessEqual(our_err, bound, f"{name} {dtype}: logits further from the float64 truth than "
                                             f"{FACTOR} x transformers' own {dtype} rounding")
        self.assertLessEqual(loss_our_err, loss_bound, f"{name} {dtype}: loss")
        if dtype == "fp32":
            self.assertLessEqual(between, GOAL_FP32, f"{name}: fp32 logits differ from transformers' by more than 1e-5")
            self.assertLessEqual(abs(our_loss - their_loss), GOAL_FP32, f"{name}: fp32 loss")

    def test_gqa_theta500k_untied_fp32(self):
        self._case("gqa_theta500k_untied", "fp32")

    def test_llama3_rope_scaling_fp32(self):
        self._case("llama3_rope_scaling", "fp32")

    def test_biases_tied_mqa_head_dim24_fp32(self):
        self._case("biases_tied_mqa_head_dim24", "fp32")

    def test_llama2_mha_fp32(self):
        self._case("llama2_mha_theta1e4", "fp32")

    def test_gqa_theta500k_untied_bf16(self):
        self._case("gqa_theta500k_untied", "bf16")

    def test_llama3_rope_scaling_bf16(self):
        self._case("llama3_rope_scaling", "bf16")


class LlamaFineTune(unittest.TestCase):
    STEPS = 20
    MODEL = hf.shape(n_layer=2, n_embd=64, n_head=4, n_kv_head=2, intermediate=128, block=32)
    OPT = {"name": "adamw", "lr": 3e-3, "weight_decay": 0.1, "betas": [0.9, 0.95], "eps": 1e-8}
    SCHED = {"name": "cosine", "warmup_steps": 3, "min_lr_ratio": 0.1}
    VAL = 0.1
    SEQ = 32

    @classmethod
    def setUpClass(cls):
        cls._tmp = tempfile.TemporaryDirectory(prefix="accel_llama_ft_")
        d = cls._tmp.name
        cls.tokens = ts.make_tokens(os.path.join(d, "tok.bin"), n=20000, seed=1)
        cls.init_model = hf.hf_model(cls.MODEL, seed=3)  # transformers' own init (std 0.02, norms 1)
        cls.init = hf.save_accel_weights(cls.init_model, os.path.join(d, "init.safetensors"))
        torch.set_num_threads(1)  # as each rank of a world-2 run computes
        runs = [cls._reference(micro, accum) for micro, accum in ((8, 1), (2, 4), (4, 2))]
        cls.runs = [Run(metrics, weights) for metrics, weights in runs]

    @classmethod
    def tearDownClass(cls):
        cls._tmp.cleanup()

    @classmethod
    def _reference(cls, micro, accum):
        return hf.hf_train(cls.MODEL, cls.init_model, cls.tokens, cls.VAL, 1, micro, accum, cls.STEPS, cls.SEQ,
                           cls.OPT, cls.SCHED, max_norm=1.0)

    def _accel(self, label, sets):
        d = tempfile.mkdtemp(dir=self._tmp.name)
        out = os.path.join(d, "out")
        job = ts.job(out, data_path=self.tokens, world=2, micro=4, accum=1, steps=self.STEPS, lr=self.OPT["lr"],
                     warmup=self.SCHED["warmup_steps"], eval_every=0, init_from=self.init)
        job["model"] = dict(self.MODEL)
        job["data"]["val_fraction"] = self.VAL
        p = ts.launch(ts.write_job(os.path.join(d, "job.yaml"), job), sets=sets)
        self.assertEqual(p.returncode, 0, f"{label}: {ts.describe(p)}")
        run = Run(ts.read_metrics(out), read_safetensors_arrays(os.path.join(out, "weights.safetensors")))
        self.assertEqual([r["step"] for r in run.metrics], list(range(self.STEPS)))
        return run

    def test_strategies_agree_with_transformers_loop(self):
        ref = self.runs[0]
        bounds = derive(self, self.runs)
        norms = [r["grad_norm"] for r in ref.metrics]
        self.assertTrue(any(n > 1.0 for n in norms) and any(n < 1.0 for n in norms),
                        f"the reference should clip on some steps and not on others: {norms}")
        cases = {
            "ddp": ("backend=ddp",),
            "zero3": ("backend=deepspeed", "deepspeed.zero_stage=3"),
            "zero3_offload_cpu": ("backend=deepspeed", "deepspeed.zero_stage=3",
                                  "deepspeed.offload_optimizer_device=cpu", "deepspeed.offload_param_device=cpu"),
            "fsdp_full_shard": ("backend=fsdp", "fsdp.sharding_strategy=FULL_SHARD"),
        }
        rows = {}
        for label, sets in cases.items():
            run = self._accel(label, sets)
            diffs = differences(run, ref, label)
            rows[label] = diffs
            bounds.check(self, label, diffs)
        print(f"\n20 steps at world 2 against the transformers loop, {bounds.describe()}:")
        for label, diffs in rows.items():
            print(row(label, diffs, bounds))
        print(check_controls(self, ref, bounds))
        print(f"  loss {ref.metrics[0]['loss']:.5f} -> {ref.metrics[-1]['loss']:.5f}")


class LlamaSpecInit(unittest.TestCase):
    """The spec init of a llama (no init_from) is the same bits at every world size and strategy: one
    step at lr 0 leaves the weights as initialized (AdamW's update and decay are both scaled by lr),
    so weights.safetensors is the initialization each run built, whole (world 1, ddp), from shards
    (world 2, zero 3) or from shards of four (world 4, FULL_SHARD, bf16 compute)."""

    def test_same_bits_at_world_1_2_4(self):
        with tempfile.TemporaryDirectory(prefix="accel_llama_init_") as d:
            tokens = ts.make_tokens(os.path.join(d, "tok.bin"), n=5000, seed=2)
            model = hf.shape(n_layer=3, n_embd=32, n_head=4, n_kv_head=2, intermediate=48, block=16,
                             attention_bias=True)
            runs = {"world 1 ddp": (1, ("backend=ddp",)),
                    "world 2 zero 3": (2, ("backend=deepspeed", "deepspeed.zero_stage=3")),
                    "world 4 FULL_SHARD bf16": (4, ("backend=fsdp", "mixed_precision=bf16"))}
            weights = {}
            for label, (world, sets) in runs.items():
                out = os.path.join(d, label.replace(" ", "_"))
                job = ts.job(out, data_path=tokens, world=world, micro=1, steps=1, lr=0.0, warmup=0, eval_every=0)
                job["model"] = dict(model)
                job["training"]["seq_len"] = 16
                p = ts.launch(ts.write_job(out + ".yaml", job), sets=sets)
                self.assertEqual(p.returncode, 0, f"{label}: {ts.describe(p)}")
                weights[label] = ts.read_bytes(os.path.join(out, "weights.safetensors"))
            first = next(iter(weights))
            for label, data in weights.items():
                self.assertEqual(data, weights[first], f"{label}: spec init differs from {first}")
            init = read_safetensors_arrays(os.path.join(d, "world_1_ddp", "weights.safetensors"))
            self.assertIn("lm_head.weight", init)
            self.assertTrue((init["norm.weight"] == 1).all() and (init["layers.2.self_attn.o_proj.bias"] == 0).all())
            print(f"\n[spec init] {len(init)} tensors, identical bytes at world 1, 2 and 4; "
                  f"layers.0.mlp.gate_proj.weight std {init['layers.0.mlp.gate_proj.weight'].std():.4f}")


if __name__ == "__main__":
    unittest.main()
