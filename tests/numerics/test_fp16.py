"""mixed_precision fp16 end to end (the loss scaler in the Accelerator, engine/grad_scaling.hpp):
the quickstart GPT narrowed to width 64 and windows of 32 tokens on the built-in synthetic data at
world 2, fp16 parameters, gradients and their communication, fp32 masters and optimizer states, the
loss multiplied by the scale inside backward(). libtorch 2.11's CPU kernels run fp16, so all of it
runs here. CPU fp16 is slow (about 1 s a step at the quickstart's width 128 and 64-token windows on
the 2-core development machine, 6x less at width 64, half that again at 32 tokens), hence the
narrower model and shorter windows, and a learning rate (1e-2, warmup 6) that trains it in STEPS
steps.

Two jobs at each of the stages they name: MOVING, whose loss scale starts at 2^20 with hysteresis 1
and a growth window of 3, so it overflows on steps 0 and 1 (skipped), halves to 2^18 where the
gradients fit, doubles after 3 clean steps (steps 2-4), overflows again on steps 5 and 6 and trains
on step 7 at 2^17 (4 of its MOVING_STEPS = 8 steps skipped, measured; every scale event the claims
below need happens by then, and the lr is still warming up, so a longer run only repeats them); and
the default scale (2^16, which never overflows here) over STEPS steps for the comparison with fp32.
- Stages 1-3 reproduce stage 0's MOVING run exactly: loss, lr, loss scale and skipped flag at every
  step, and the grad norm of every applied step to fp64 rounding of its shard sum, as for bf16
  (test_mixed_precision.py): with two ranks every gradient average is one fp16 addition then a
  halving, and every stage unscales, tests for overflow and accumulates the same values in fp32.
- fp16 (default scale, stage 0) follows the fp32 run of the same job within 1e-3 per step in loss:
  measured 2.3e-4 over 16 steps (fp16 keeps 11 significant bits), while a semantic error (a scale
  not divided out, a dropped reduction) moves the loss by far more. The pre-clip gradient norm
  within 0.1 relative: measured 3.6e-3 (a step whose norm spikes amplifies the weights' fp16
  rounding: 9.2e-3 with 64-token windows, whose norm spikes to 1.8); AdamW trains nearly the same weights
  from gradients off by a constant factor, so the norm is what shows a skipped unscale or a doubled
  reduction (off by 0.5 or more).
- Overflow (MOVING at stage 3): the overflowing steps are skipped on every rank (no update, the
  schedule does not advance), the scale halves each time (hysteresis 1) until the gradients fit,
  then the run trains.
- Resume (MOVING at stage 2): the scale and the skipped count are in the checkpoint; the run's
  checkpoint at step STOP, taken after overflows and a growth, resumed, reproduces its remaining
  steps exactly (an overflow at the restored scale, then an applied step), loss scale included.
  The trainer writes checkpoints every checkpoint_every steps and at the end with one function, so
  this is resuming a run stopped at STOP.
"""
import os
import shutil
import tempfile
import unittest

import trainer_test_support as ts

QUICKSTART = os.path.join(ts.ROOT, "config_templates", "quickstart.yaml")
STEPS = 16  # the last loss under 90% of the first: 0.86 measured (default scale)
MOVING_STEPS = 8  # the MOVING runs (module docstring): two overflow phases and a growth
FAST = ["model.n_embd=64", "training.seq_len=32", "optimizer.lr=1e-2", "scheduler.warmup_steps=6"]
# The resume test's checkpoint: MOVING's scale has moved (two overflows from 2^20, then growth) by then.
STOP = 6
MOVING = ["deepspeed.initial_scale_power=20", "deepspeed.hysteresis=1", "deepspeed.loss_scale_window=3",
          f"training.checkpoint_every={STOP}"]
# fp16 against fp32, per step (see the module's docstring for the measured values).
FP32_LOSS_TOL = 1e-3
FP32_GRAD_NORM_RTOL = 0.1
# Between stages: the norm is combined from shards in fp64 (sum over ranks): only its last bit may move.
STAGE_GRAD_NORM_RTOL = 1e-12


class Fp16(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="accel_fp16_")
        cls.runs = {}

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    def run_job(self, name, stage, precision="fp16", extra=(), steps=STEPS):
        """metrics.jsonl of the job, launched once for every test that reads it."""
        if name in self.runs:
            return self.runs[name]
        out = os.path.join(self.dir, name)
        sets = ["main_process_port=0", "num_processes=2", "training.micro_batch_size=8", "backend=deepspeed",
                f"deepspeed.zero_stage={stage}", f"mixed_precision={precision}", f"training.max_steps={steps}",
                "training.eval_every=0", f"training.output_dir={out}", "training.save_weights=false"] + FAST + list(extra)
        if not any(s.startswith("training.resume=") for s in extra):
            sets.append("training.resume=never")
        p = ts.run([ts.ACCEL, "launch", QUICKSTART] + [x for s in sets for x in ("--set", s)], cwd=self.dir)
        self.assertEqual(p.returncode, 0, ts.describe(p))
        self.runs[name] = ts.read_metrics(out)
        return self.runs[name]

    def moving(self, stage):
        return self.run_job(f"moving_s{stage}", stage, extra=MOVING, steps=MOVING_STEPS)

    def test_stages_equal_stage0_and_follow_fp32(self):
        ref = self.moving(0)
        self.assertEqual(len(ref), MOVING_STEPS)
        self.assertTrue(any(r["skipped"] for r in ref) and not all(r["skipped"] for r in ref), ref)
        # the short run still holds a growth, so the stages are compared through every scale event
        self.assertTrue(any(b["loss_scale"] > a["loss_scale"] for a, b in zip(ref, ref[1:])), ref)
        fixed = ("step", "loss", "lr", "loss_scale", "skipped")
        for stage in (1, 2, 3):
            got = self.moving(stage)
            self.assertEqual([{k: r[k] for k in fixed} for r in got], [{k: r[k] for k in fixed} for r in ref],
                             f"zero {stage}")
            applied = [(a["grad_norm"], b["grad_norm"]) for a, b in zip(got, ref) if not b["skipped"]]
            dnorm = ts.largest_diff((abs(a - b) / b for a, b in applied), f"zero {stage} grad_norm")
            print(f"\n[fp16 zero {stage} vs zero 0, moving scale] identical loss, lr, scale and skips; "
                  f"grad norm rel {dnorm:.3e} over {len(applied)} applied steps")
            self.assertLessEqual(dnorm, STAGE_GRAD_NORM_RTOL, f"zero {stage}")
        fp16 = self.run_job("default_s0", 0)
        self.assertEqual(len(fp16), STEPS)
        self.assertTrue(all(r["loss_scale"] == 65536 and not r["skipped"] for r in fp16), fp16)
        self.assertLess(fp16[-1]["loss"], 0.9 * fp16[0]["loss"], "fp16 did not train")
        fp32 = self.run_job("fp32", 0, precision="no")
        self.assertEqual(len(fp32), STEPS)
        dloss = ts.largest_diff((abs(a["loss"] - b["loss"]) for a, b in zip(fp16, fp32)), "fp16 vs fp32 loss")
        dnorm = ts.largest_diff((abs(a["grad_norm"] - b["grad_norm"]) / b["grad_norm"] for a, b in zip(fp16, fp32)),
                                "fp16 vs fp32 grad_norm")
        print(f"[fp16 vs fp32, zero 0] max |dloss| {dloss:.3e}, grad norm rel {dnorm:.3e}")
        self.assertLessEqual(dloss, FP32_LOSS_TOL)
        self.assertLessEqual(dnorm, FP32_GRAD_NORM_RTOL)
        self.assertNotEqual([r["loss"] for r in fp16], [r["loss"] for r in fp32], "fp16 did not change the compute")

    def test_overflowing_steps_are_skipped_and_the_scale_falls(self):
        got = self.moving(3)
        skipped = [r["skipped"] for r in got]
        first_applied = skipped.index(False)
        print(f"\n[fp16 overflow] skipped {sum(skipped)} steps; scales {[r['loss_scale'] for r in got]}")
        self.assertGreater(first_applied, 0, "a scale of 2^20 did not overflow")
        self.assertTrue(all(skipped[:first_applied]))
        for a, b in zip(got[:first_applied], got[1:first_applied + 1]):
            self.assertEqual(b["loss_scale"], a["loss_scale"] / 2)  # halved after each overflow
        # The schedule counts applied steps: the first applied step runs at the first step's lr.
        self.assertEqual(got[first_applied]["lr"], got[0]["lr"])
        self.assertLess(got[-1]["loss"], got[first_applied]["loss"], "no training after the overflows")

    def test_resume_restores_the_scale(self):
        full = self.moving(2)
        self.assertTrue(any(r["skipped"] for r in full[:STOP]), "the scale did not move before the checkpoint")
        self.assertGreater(len({r["loss_scale"] for r in full[:STOP]}), 2)
        checkpoint = ts.ckpt_dir(os.path.join(self.dir, "moving_s2"), STOP)
        resumed = self.run_job("resumed", 2, extra=MOVING + [f"training.resume={checkpoint}"], steps=MOVING_STEPS)
        self.assertEqual([r["step"] for r in resumed], list(range(STOP, MOVING_STEPS)))
        self.assertEqual(ts.without_timing(resumed), ts.without_timing(full[STOP:]))


if __name__ == "__main__":
    unittest.main()
