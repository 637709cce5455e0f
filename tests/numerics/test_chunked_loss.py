"""training.loss_chunk_tokens end to end: the built-in trainer with the chunked head and cross-entropy
(trainer/models/chunked_cross_entropy.hpp; the tied table's lookup with a sparse gradient) against the
plain path, under the sharding engine (deepspeed zero 3 at world 2, every parameter partitioned, the
root gathered as today), fp32 and bf16.

The quickstart GPT (vocab 256, 8 x 64 tokens a micro-step) in chunks of 48 tokens: 11 chunks, the last
one short. The chunked path computes the plain path's sums in other groupings (the loss over chunk
sums, the head's gradient over chunks of tokens; bf16 rounds the running [V, C] gradient once per
chunk, and the tied table's gradient adds the lookup's rows into the head's one by one), so it is a
regrouping like those the noise runs make: the plain run again at micro 4 x accumulation 2 and at
world 1 (reordering_noise.derive: FACTOR x their largest mutual difference per quantity; bf16 with
LOW_PRECISION_NOISE_CEILING_RTOL and the rms of each tensor's differences, test_mixed_precision.py
says why). The controls (reordering_noise.check_controls) show what a bug does to the same bounds.
Steps: 8 (the warmup, clipping above and below 1.0, moments of earlier steps).
Activation checkpointing with the chunked loss: test_activation_checkpointing.py (bitwise).
"""
import os
import shutil
import tempfile
import unittest

import trainer_test_support as ts
from api_test_support import read_safetensors_arrays
from reordering_noise import (LOW_PRECISION_NOISE_CEILING_RTOL, NOISE_CEILING_RTOL, Run, derive, differences, largest,
                              report_agreement, rms)

QUICKSTART = os.path.join(ts.ROOT, "config_templates", "quickstart.yaml")
STEPS = 8
CHUNK = 48


class ChunkedLossAgreement(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="accel_chunked_loss_")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    def run_job(self, name, precision, world=2, accum=1, chunk=0):
        out = os.path.join(self.dir, name)
        sets = ["main_process_port=0", f"num_processes={world}", f"training.micro_batch_size={16 // world // accum}",
                f"training.gradient_accumulation_steps={accum}", "backend=deepspeed", "deepspeed.zero_stage=3",
                "deepspeed.stage3_param_persistence_threshold=0", f"mixed_precision={precision}",
                f"training.max_steps={STEPS}", "training.eval_every=0", "training.resume=never",
                f"training.output_dir={out}", "training.save_weights=true", "training.checkpoint_at_end=false",
                "model.n_layer=1", "optimizer.lr=4e-3", "scheduler.warmup_steps=2",
                f"training.loss_chunk_tokens={chunk}"]
        env = ts.QUIET_IDLE_THREADS if world == 1 else None
        p = ts.run([ts.ACCEL, "launch", QUICKSTART] + [x for s in sets for x in ("--set", s)], cwd=self.dir,
                   env_extra=env)
        self.assertEqual(p.returncode, 0, ts.describe(p))
        run = Run(ts.read_metrics(out), read_safetensors_arrays(os.path.join(out, "weights.safetensors")))
        self.assertEqual([r["step"] for r in run.metrics], list(range(STEPS)))
        return run

    def agree(self, precision):
        ref = self.run_job(f"{precision}_plain", precision)
        low = precision != "no"
        noise = [ref, self.run_job(f"{precision}_plain_4x2", precision, accum=2),
                 self.run_job(f"{precision}_plain_w1", precision, world=1)]
        bounds = derive(self, noise, ceiling=LOW_PRECISION_NOISE_CEILING_RTOL if low else NOISE_CEILING_RTOL,
                        weight_stat=rms if low else largest)
        chunked = self.run_job(f"{precision}_chunked", precision, chunk=CHUNK)
        self.assertNotEqual([r["loss"] for r in chunked.metrics][1:], [r["loss"] for r in ref.metrics][1:],
                            "the chunked loss changed nothing: is training.loss_chunk_tokens read?")
        diffs = differences(chunked, ref, f"{precision}: chunked vs plain", weight_stat=bounds.weight_stat)
        report_agreement(self, {f"chunks of {CHUNK}": diffs}, ref, bounds,
                         label=f"{precision}: chunked loss against the plain one (zero 3, world 2)", low_precision=low)
        bounds.check(self, f"{precision}: chunked vs plain", diffs)
        self.assertLess(chunked.metrics[-1]["loss"], 0.9 * chunked.metrics[0]["loss"], "the chunked run did not train")

    def test_fp32(self):
        self.agree("no")

    def test_bf16(self):
        self.agree("bf16")


if __name__ == "__main__":
    unittest.main()
