"""mixed_precision fp16 end to end (the loss scaler in the Accelerator, backends/core/grad_scaling.hpp):
the quickstart GPT on the built-in synthetic data at world 2, fp16 parameters, gradients and their
communication, fp32 masters and optimizer states, the loss multiplied by the scale inside backward().
libtorch 2.11's CPU kernels run fp16, so all of it runs here.

- Stages 1-3 reproduce stage 0's curve exactly (loss, and the grad norm to fp64 rounding of its
  shard sum), as for bf16 (test_mixed_precision.py): with two ranks every gradient average is one
  fp16 addition then a halving, and every stage unscales and accumulates the same values in fp32.
- fp16 follows the fp32 run of the same job within 1e-3 per step: measured 3.6e-5 over 30 steps
  (fp16 keeps 11 significant bits; bf16's 8 gave 2.2e-3 over 60 steps), so ~30x margin, while a
  semantic error (a scale not divided out, a dropped reduction) moves the loss by far more.
- Overflow: a scale of 2^24 overflows fp16 gradients; those steps are skipped on every rank (no
  update, the schedule does not advance), the scale halves each time (hysteresis 1) until the
  gradients fit, then the run trains.
- Resume: the scale and the skipped count are in the checkpoint; a run stopped at step 10 and resumed
  reproduces the uninterrupted run's every step exactly, loss scale included, with the scale
  moving (overflows and growth) before the checkpoint.
"""
import os
import shutil
import tempfile
import unittest

import trainer_test_support as ts

QUICKSTART = os.path.join(ts.ROOT, "config_templates", "quickstart.yaml")
STEPS = 30


class Fp16(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="accel_fp16_")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    def run_job(self, name, stage, precision="fp16", steps=STEPS, extra=()):
        out = os.path.join(self.dir, name)
        sets = ["main_process_port=0", "num_processes=2", "training.micro_batch_size=8", "backend=deepspeed",
                f"deepspeed.zero_stage={stage}", f"mixed_precision={precision}", f"training.max_steps={steps}",
                "training.eval_every=0", f"training.output_dir={out}", "training.save_weights=false"] + list(extra)
        if not any(s.startswith("training.resume=") for s in extra):
            sets.append("training.resume=never")
        p = ts.run([ts.ACCEL, "launch", QUICKSTART] + [x for s in sets for x in ("--set", s)], cwd=self.dir)
        self.assertEqual(p.returncode, 0, ts.describe(p))
        return ts.read_metrics(out)

    def test_stages_equal_stage0_and_follow_fp32(self):
        ref = self.run_job("s0", 0)
        self.assertEqual(len(ref), STEPS)
        self.assertTrue(all(r["loss_scale"] == 65536 and not r["skipped"] for r in ref), ref[0])
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
        print(f"[fp16 vs fp32, zero 0] max |dloss| {dloss:.3e}")
        self.assertLessEqual(dloss, 1e-3)
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
        moving = ["deepspeed.initial_scale_power=20", "deepspeed.hysteresis=1", "deepspeed.loss_scale_window=3"]
        full = self.run_job("whole", 2, extra=moving)
        self.assertTrue(any(r["skipped"] for r in full[:10]), "the scale did not move before the checkpoint")
        self.assertGreater(len({r["loss_scale"] for r in full[:10]}), 2)
        self.run_job("parts", 2, steps=10, extra=moving)
        resumed = self.run_job("parts", 2, extra=moving + ["training.resume=auto"])
        self.assertEqual([r["step"] for r in resumed], list(range(STEPS)))
        self.assertEqual(ts.without_timing(resumed), ts.without_timing(full))


if __name__ == "__main__":
    unittest.main()
