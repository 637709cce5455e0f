"""Activation checkpointing end to end (`fsdp.activation_checkpointing`, docs/design/0010).

    ACCEL_BINARY=build/accel PYTHONDONTWRITEBYTECODE=1 \
        scripts/python -m unittest discover -s tests/numerics -p test_activation_checkpointing.py -v

Each test compares one job launched through `accel launch` with activation_checkpointing false and
true, and requires the same numbers exactly: every metrics record (loss, grad_norm, eval_loss, lr; not the
timing fields) and a byte-identical weights.safetensors. The recompute runs the same ops on the same
values in the same order as the stored forward, and collectives are issued in the same order, so on
CPU nothing may differ, not even in the last bit (these configurations without checkpointing are
checked against the Python reference in test_trainer_end_to_end.py). Covered: world 1 (NO_SHARD runs
the ddp engine), FULL_SHARD and SHARD_GRAD_OP at world 2, with gradient accumulation, with bf16
mixed precision, the mlp and llama models, and the chunked loss (training.loss_chunk_tokens).

The jobs train on the built-in synthetic data from the model's own seeded initialisation: what is
compared is one job with and without recompute, so neither a token file nor exported weights (each
a Python process importing torch) add anything. A SHARD_GRAD_OP run with recompute is compared with
the FULL_SHARD run without it of the same world, batch and accumulation (a launch fewer each):
both strategies run the sharding engine on the same gradient shards and differ only in when the
gathered parameters are freed, copies of the same values, so their numbers are the same bit for bit
(measured: metrics and weights identical at world 1, world 2 and world 2 with accumulation).
NO_SHARD (the ddp engine) and FULL_SHARD are not: their gradient norms differ in the last bit at
world 1 and 2 (measured), and with accumulation their losses and weights too, so each keeps its own
run without recompute.

Each job trains 4 steps: a difference in the recompute shows in the first step it arises, and 4 steps
hold both regimes of the clipping (the GPT's gradient norm is above 1.0 in the first two steps and
below in the last two), the warmup and the cosine schedule, and updates from moments of earlier steps.
"""
import os
import sys
import tempfile
import unittest

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import trainer_test_support as ts  # noqa: E402

NOTE = "activation_checkpointing: each "
# Held-out windows for the two evaluations: 0.2% of the synthetic data's 32767 windows of 32 tokens,
# 66, several batches on every rank (9 at world 2 x micro batch 4): eval_loss is compared exactly, so
# more windows add cost, not power.
DATA = {"kind": "synthetic", "val_fraction": 0.002}
# Each model's overrides of the gpt job, and the units the start-up log names as recomputing. The
# llama one has grouped-query attention, an untied head and rope_theta 500000 (its units are
# LlamaDecoderLayer; the default transformer_layer_cls_to_wrap, Block, falls back to the wrappers).
MODELS = {
    "gpt": ((), "Block (h.0 .. h.1)"),
    "mlp": (("model.name=mlp", "model.n_layer=3"), "layer (layer.0 .. layer.2)"),
    "llama": (("model.name=llama", "model.n_kv_head=2", "model.intermediate_size=96", "model.rope_theta=500000",
               "fsdp.transformer_layer_cls_to_wrap=LlamaDecoderLayer"), "LlamaDecoderLayer (layers.0 .. layers.1)"),
}


class ActivationCheckpointingAgreement(unittest.TestCase):
    STEPS = 4
    EVAL_EVERY = 2  # evaluations after steps 2 and 4 (records 1 and 3)
    LR = 3e-3  # as the reference tests: clipping at 1.0 is active on some steps

    @classmethod
    def setUpClass(cls):
        cls._tmp = tempfile.TemporaryDirectory(prefix="accel_ckpt_")
        cls.runs = {}

    @classmethod
    def tearDownClass(cls):
        cls._tmp.cleanup()

    def _run(self, world, micro, accum, sets):
        """The job's output directory and start-up log, launched once for every test that reads it."""
        key = (world, micro, accum) + sets
        if key in self.runs:
            return self.runs[key]
        out = os.path.join(self._tmp.name, f"run{len(self.runs)}")
        job = ts.job(out, world=world, micro=micro, accum=accum, steps=self.STEPS, lr=self.LR, warmup=2,
                     eval_every=self.EVAL_EVERY)
        job["data"] = dict(DATA)
        # A lone rank computes with one thread, as each of two does: the launcher would give it both
        # cores of this 2-core machine, which tests running beside it share.
        env = {"OMP_NUM_THREADS": "1"} if world == 1 else None
        p = ts.launch(ts.write_job(out + ".yaml", job), sets=sets, env_extra=env)
        self.assertEqual(p.returncode, 0, f"{' '.join(sets)}\n{ts.describe(p)}")
        with open(os.path.join(out, "logs", "rank_0.log")) as f:
            self.runs[key] = out, f.read()
        return self.runs[key]

    def _agree(self, strategy, world, micro, accum=1, extra=(), model="gpt", stored_strategy=None):
        """strategy with recompute against stored_strategy (default: strategy) without it."""
        stored_strategy = stored_strategy or strategy
        common = ("backend=fsdp",) + tuple(extra) + MODELS[model][0]
        stored, log_stored = self._run(world, micro, accum, common + (
            f"fsdp.sharding_strategy={stored_strategy}", "fsdp.activation_checkpointing=false"))
        recomputed, log_recomputed = self._run(world, micro, accum, common + (
            f"fsdp.sharding_strategy={strategy}", "fsdp.activation_checkpointing=true"))
        self.assertNotIn(NOTE, log_stored)
        self.assertIn(NOTE + MODELS[model][1], log_recomputed,
                      "the start-up log does not say which units recompute")
        a, b = ts.read_metrics(stored), ts.read_metrics(recomputed)
        self.assertEqual(len(a), self.STEPS)
        self.assertEqual([r["step"] for r in a if "eval_loss" in r], [1, 3])
        pair = f"{strategy} with recompute vs {stored_strategy} without"
        if stored_strategy != strategy:  # another strategy moves other bytes; the numbers must still agree
            a, b = ([{k: v for k, v in r.items() if k != "comm_bytes"} for r in rs] for rs in (a, b))
        self.assertEqual(ts.without_timing(a), ts.without_timing(b), f"metrics differ: {pair}")
        self.assertEqual(ts.read_bytes(os.path.join(stored, "weights.safetensors")),
                         ts.read_bytes(os.path.join(recomputed, "weights.safetensors")),
                         f"final weights differ: {pair}")
        print(f"\n[{pair}, world {world} micro {micro} accum {accum} {' '.join(extra)}] identical: "
              f"loss {a[0]['loss']:.6f} -> {a[-1]['loss']:.6f}, last grad_norm {a[-1]['grad_norm']:.6f}")

    def test_world1_no_shard_ddp_engine(self):
        self._agree("NO_SHARD", world=1, micro=8)

    def test_world1_full_shard(self):
        self._agree("FULL_SHARD", world=1, micro=8)

    def test_full_shard_world2(self):
        self._agree("FULL_SHARD", world=2, micro=4)

    def test_shard_grad_op_world2(self):
        self._agree("SHARD_GRAD_OP", world=2, micro=4, stored_strategy="FULL_SHARD")

    def test_full_shard_world2_accum2(self):
        self._agree("FULL_SHARD", world=2, micro=2, accum=2)

    def test_shard_grad_op_world2_accum2(self):
        self._agree("SHARD_GRAD_OP", world=2, micro=2, accum=2, stored_strategy="FULL_SHARD")

    def test_no_shard_world2_accum2(self):
        self._agree("NO_SHARD", world=2, micro=2, accum=2)

    def test_full_shard_world2_bf16_backward_post(self):
        self._agree("FULL_SHARD", world=2, micro=4, extra=("mixed_precision=bf16", "fsdp.backward_prefetch=BACKWARD_POST"))

    def test_full_shard_world2_mlp(self):
        self._agree("FULL_SHARD", world=2, micro=4, model="mlp")

    def test_full_shard_world2_llama(self):
        self._agree("FULL_SHARD", world=2, micro=4, model="llama")

    def test_full_shard_world2_llama_fp16(self):
        self._agree("FULL_SHARD", world=2, micro=4, extra=("mixed_precision=fp16",), model="llama")

    def test_no_shard_world2_accum2_llama_bf16(self):
        self._agree("NO_SHARD", world=2, micro=2, accum=2, extra=("mixed_precision=bf16",), model="llama")

    # The chunked loss (training.loss_chunk_tokens, trainer/models/chunked_cross_entropy.hpp) forms the
    # head's gradients in forward, outside the recomputed units: recompute must leave its numbers as
    # they are too, with the tied table's sparse lookup gradient (gpt, bf16) and with the fp16 loss
    # scale over accumulation steps as its gradient-scale hint (llama, untied). 4 x 32 tokens a
    # micro-step in chunks of 48: three chunks, the last one short.
    def test_full_shard_world2_bf16_chunked_loss(self):
        self._agree("FULL_SHARD", world=2, micro=4, extra=("mixed_precision=bf16", "training.loss_chunk_tokens=48"))

    def test_full_shard_world2_accum2_llama_fp16_chunked_loss(self):
        self._agree("FULL_SHARD", world=2, micro=2, accum=2, extra=("mixed_precision=fp16", "training.loss_chunk_tokens=48"),
                    model="llama")


if __name__ == "__main__":
    unittest.main()
