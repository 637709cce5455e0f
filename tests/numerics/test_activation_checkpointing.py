"""Activation checkpointing end to end (`fsdp.activation_checkpointing`, docs/design/0010).

    ACCEL_BINARY=build/accel PYTHONDONTWRITEBYTECODE=1 \
        scripts/python -m unittest discover -s tests/numerics -p test_activation_checkpointing.py -v

Each test runs one job twice through `accel launch`, with activation_checkpointing false and true,
and requires the same numbers exactly: every metrics record (loss, grad_norm, eval_loss, lr; not the
timing fields) and a byte-identical weights.safetensors. The recompute runs the same ops on the same
values in the same order as the stored forward, and collectives are issued in the same order, so on
CPU nothing may differ, not even in the last bit (the runs without checkpointing are checked against
the Python reference in test_trainer_end_to_end.py). Covered: world 1 (NO_SHARD runs the ddp
engine), FULL_SHARD and SHARD_GRAD_OP at world 2, with gradient accumulation, with bf16 mixed
precision, and the mlp model.
"""
import os
import sys
import tempfile
import unittest

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import trainer_test_support as ts  # noqa: E402

NOTE = "activation_checkpointing: each "


class ActivationCheckpointingAgreement(unittest.TestCase):
    STEPS = 8
    LR = 3e-3  # as the reference tests: clipping at 1.0 is active on some steps

    @classmethod
    def setUpClass(cls):
        cls._tmp = tempfile.TemporaryDirectory(prefix="accel_ckpt_")
        d = cls._tmp.name
        cls.tokens = ts.make_tokens(os.path.join(d, "tok.bin"), n=100000, seed=1)
        cls.init = ts.export_init(os.path.join(d, "init.safetensors"))

    @classmethod
    def tearDownClass(cls):
        cls._tmp.cleanup()

    def _run(self, d, name, world, micro, accum, sets, init_from):
        out = os.path.join(d, name)
        job = ts.job(out, data_path=self.tokens, world=world, micro=micro, accum=accum, steps=self.STEPS,
                     lr=self.LR, warmup=2, eval_every=4, init_from=init_from)
        p = ts.launch(ts.write_job(os.path.join(d, name + ".yaml"), job), sets=sets)
        self.assertEqual(p.returncode, 0, f"{name} {' '.join(sets)}\n{ts.describe(p)}")
        with open(os.path.join(out, "logs", "rank_0.log")) as f:
            log = f.read()
        return out, log

    def _agree(self, strategy, world, micro, accum=1, extra=(), gpt=True):
        d = tempfile.TemporaryDirectory(prefix="accel_ckpt_pair_")
        self.addCleanup(d.cleanup)
        sets = ("backend=fsdp", f"fsdp.sharding_strategy={strategy}") + tuple(extra)
        init_from = self.init if gpt else None
        if not gpt:
            sets += ("model.name=mlp", "model.n_layer=3")
        stored, log_stored = self._run(d.name, "stored", world, micro, accum,
                                       sets + ("fsdp.activation_checkpointing=false",), init_from)
        recomputed, log_recomputed = self._run(d.name, "recomputed", world, micro, accum,
                                               sets + ("fsdp.activation_checkpointing=true",), init_from)
        self.assertNotIn(NOTE, log_stored)
        self.assertIn(NOTE + ("Block (h.0 .. h.1)" if gpt else "layer (layer.0 .. layer.2)"), log_recomputed,
                      "the start-up log does not say which units recompute")
        a, b = ts.read_metrics(stored), ts.read_metrics(recomputed)
        self.assertEqual(len(a), self.STEPS)
        self.assertEqual([r["step"] for r in a if "eval_loss" in r], [3, 7])
        self.assertEqual(ts.without_timing(a), ts.without_timing(b), "metrics differ with activation checkpointing")
        self.assertEqual(ts.read_bytes(os.path.join(stored, "weights.safetensors")),
                         ts.read_bytes(os.path.join(recomputed, "weights.safetensors")),
                         "final weights differ with activation checkpointing")
        print(f"\n[{strategy} world {world} micro {micro} accum {accum} {' '.join(extra)}] identical: "
              f"loss {a[0]['loss']:.6f} -> {a[-1]['loss']:.6f}, last grad_norm {a[-1]['grad_norm']:.6f}")

    def test_world1_no_shard_ddp_engine(self):
        self._agree("NO_SHARD", world=1, micro=8)

    def test_world1_full_shard(self):
        self._agree("FULL_SHARD", world=1, micro=8)

    def test_full_shard_world2(self):
        self._agree("FULL_SHARD", world=2, micro=4)

    def test_shard_grad_op_world2(self):
        self._agree("SHARD_GRAD_OP", world=2, micro=4)

    def test_full_shard_world2_accum2(self):
        self._agree("FULL_SHARD", world=2, micro=2, accum=2)

    def test_shard_grad_op_world2_accum2(self):
        self._agree("SHARD_GRAD_OP", world=2, micro=2, accum=2)

    def test_no_shard_world2_accum2(self):
        self._agree("NO_SHARD", world=2, micro=2, accum=2)

    def test_full_shard_world2_bf16_backward_post(self):
        self._agree("FULL_SHARD", world=2, micro=4, extra=("mixed_precision=bf16", "fsdp.backward_prefetch=BACKWARD_POST"))

    def test_full_shard_world2_mlp(self):
        self._agree("FULL_SHARD", world=2, micro=4, gpt=False)


if __name__ == "__main__":
    unittest.main()
