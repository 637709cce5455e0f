"""mixed_precision fp16 end to end (the loss scaler in the Accelerator, backends/core/grad_scaling.hpp):
the quickstart GPT narrowed to width 64 on the built-in synthetic data at world 2, fp16 parameters,
gradients and their communication, fp32 masters and optimizer states, the loss multiplied by the
scale inside backward(). libtorch 2.11's CPU kernels run fp16, so all of it runs here. CPU fp16 is
slow (about 1 s a step at the quickstart's width 128 on the 2-core development machine, 6x less at
64), hence the narrower model and a learning rate (6e-3, warmup 3) that trains it in STEPS steps.

- Stages 1-3 reproduce stage 0's curve exactly (loss, and the grad norm to fp64 rounding of its
  shard sum), as for bf16 (test_mixed_precision.py): with two ranks every gradient average is one
  fp16 addition then a halving, and every stage unscales and accumulates the same values in fp32.
- fp16 follows the fp32 run of the same job within 1e-3 per step in loss: measured 1.7e-4 over 16
  steps (fp16 keeps 11 significant bits), while a semantic error (a scale not divided out, a dropped
  reduction) moves the loss by far more. The pre-clip gradient norm within 0.1 relative: measured
  9.2e-3, after a step whose norm spikes to 1.8 and amplifies the weights' fp16 rounding; AdamW
  trains nearly the same weights from gradients off by a constant factor, so the norm is what shows
  a skipped unscale or a doubled reduction (off by 0.5 or more).
- Overflow: a scale of 2^24 overflows fp16 gradients; those steps are skipped on every rank (no
  update, the schedule does not advance), the scale halves each time (hysteresis 1) until the
  gradients fit, then the run trains.
- Resume: the scale and the skipped count are in the checkpoint; a run stopped at step STOP and
  resumed reproduces the uninterrupted run's every step exactly, loss scale included, with the scale
  moving (overflows and growth) before the checkpoint.
"""
import os
import shutil
import tempfile
import unittest

import trainer_test_support as ts

QUICKSTART = os.path.join(ts.ROOT, "config_templates", "quickstart.yaml")
STEPS = 16  # the last loss under 90% of the first: 0.85 measured
FAST = ["model.n_embd=64", "optimizer.lr=6e-3"]
# The resume test's checkpoint: its scale has moved (two overflows from 2^20, then growth) by then.
STOP = 6
# fp16 against fp32, per step (see the module's docstring for the measured values).
FP32_LOSS_TOL = 1e-3
FP32_GRAD_NORM_RTOL = 0.1


class Fp16(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="accel_fp16_")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    def run_job(self, name, stage, precision="fp16", steps=STEPS, warmup=3, extra=()):
        out = os.path.join(self.dir, name)
        sets = ["main_process_port=0", "num_processes=2", "training.micro_batch_size=8", "backend=deepspeed",
                f"deepspeed.zero_stage={stage}", f"mixed_precision={precision}", f"training.max_steps={steps}",
                "training.eval_every=0", f"training.output_dir={out}", "training.save_weights=false",
                f"scheduler.warmup_steps={warmup}"] + FAST + list(extra)
        if not any(s.startswith("training.resume=") for s in extra):
            sets.append("training.resume=never")
        p = ts.run([ts.ACCEL, "launch", QUICKSTART] + [x for s in sets for x in ("--set", s)], cwd=self.dir)
        self.assertEqual(p.returncode, 0, ts.describe(p))
        return ts.read_metrics(out)

    def test_stages_equal_stage0_and_follow_fp32(self):
        ref = self.run_job("s0", 0)
        self.assertEqual(len(ref), STEPS)
        self.assertTrue(all(r["loss_scale"] == 65536 and not r["skipped"] for r in ref), ref)
        self.assertLess(ref[-1]["loss"], 0.9 * ref[0]["loss"], "fp16 did not train")
        for stage in (1, 2, 3):
            got = self.run_job(f"s{stage}", stage)
            self.assertEqual(len(got), STEPS, f"zero {stage}")
            dloss = ts.largest_diff((abs(a["loss"] - b["loss"]) for a, b in zip(got, ref)), f"zero {stage} loss")
            dnorm = ts.largest_diff((abs(a["grad_norm"] - b["grad_norm"]) / b["grad_norm"] for a, b in zip(got, ref)),
                                    f"zero {stage} grad_norm")
            print(f"\n[fp16 zero {stage} vs zero 0] max |dloss| {dloss:.3e}, grad norm rel {dnorm:.3e}")
            self.assertEqual(dloss, 0.0, f"zero {stage}")
            self.assertLessEqual(dnorm, 1e-12, f"zero {stage}")
        fp32 = self.run_job("fp32", 0, precision="no")
        self.assertEqual(len(fp32), STEPS)
        dloss = ts.largest_diff((abs(a["loss"] - b["loss"]) for a, b in zip(ref, fp32)), "fp16 vs fp32 loss")
        dnorm = ts.largest_diff((abs(a["grad_norm"] - b["grad_norm"]) / b["grad_norm"] for a, b in zip(ref, fp32)),
                                "fp16 vs fp32 grad_norm")
        print(f"[fp16 vs fp32, zero 0] max |dloss| {dloss:.3e}, grad norm rel {dnorm:.3e}")
        self.assertLessEqual(dloss, FP32_LOSS_TOL)
        self.assertLessEqual(dnorm, FP32_GRAD_NORM_RTOL)
        self.assertNotEqual([r["loss"] for r in ref], [r["loss"] for r in fp32], "fp16 did not change the compute")

    def test_overflowing_steps_are_skipped_and_the_scale_falls(self):
        got = self.run_job("overflow", 3, extra=["deepspeed.initial_scale_power=24", "deepspeed.hysteresis=1"])
        skipped = [r["skipped"] for r in got]
        first_applied = skipped.index(False)
        print(f"\n[fp16 overflow] skipped {sum(skipped)} steps; scales "
              f"{[r['loss_scale'] for r in got[:first_applied + 2]]}")
        self.assertGreater(first_applied, 0, "a scale of 2^24 did not overflow")
        self.assertTrue(all(skipped[:first_applied]))
        for a, b in zip(got[:first_applied], got[1:first_applied + 1]):
            self.assertEqual(b["loss_scale"], a["loss_scale"] / 2)  # halved after each overflow
        # The schedule counts applied steps: the first applied step runs at the first step's lr.
        self.assertEqual(got[first_applied]["lr"], got[0]["lr"])
        self.assertLess(got[-1]["loss"], got[first_applied]["loss"], "no training after the overflows")

    def test_resume_restores_the_scale(self):
        # Scale 2^20: two overflows, then growth after every 3 clean steps. A warmup as long as the
        # first part keeps its learning rates independent of max_steps (the stopped run has fewer).
        moving = ["deepspeed.initial_scale_power=20", "deepspeed.hysteresis=1", "deepspeed.loss_scale_window=3"]
        full = self.run_job("whole", 2, warmup=STOP, extra=moving)
        self.assertTrue(any(r["skipped"] for r in full[:STOP]), "the scale did not move before the checkpoint")
        self.assertGreater(len({r["loss_scale"] for r in full[:STOP]}), 2)
        self.run_job("parts", 2, steps=STOP, warmup=STOP, extra=moving)
        resumed = self.run_job("parts", 2, warmup=STOP, extra=moving + ["training.resume=auto"])
        self.assertEqual([r["step"] for r in resumed], list(range(STEPS)))
        self.assertEqual(ts.without_timing(resumed), ts.without_timing(full))


if __name__ == "__main__":
    unittest.main()
