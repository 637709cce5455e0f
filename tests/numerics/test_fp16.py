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
  step and the final fp32 masters bitwise, and the grad norm of every applied step within
  reordering_noise.fp64_norm_rtol of the parameter count (fp64 sums of the same squares in another
  order, an analysis for any order; it was 1e-12 without derivation), as for bf16
  (test_mixed_precision.py): with two ranks every gradient average is one fp16 addition then a
  halving, and every stage unscales, tests for overflow and accumulates the same values in fp32.
- fp16 (default scale, stage 0) follows the fp32 run of the same job. Their distance is fp16's
  rounding of the same computation; its yardstick is what fp16 rounding alone does to it in other
  groupings, measured in the test: the fp16 run again at micro batch 4 x accumulation 2 and at
  world 1 (one 16-row gradient), each rounding every gradient element to 2^-11 otherwise, which
  AdamW amplifies step by step (reordering_noise.derive with LOW_PRECISION_NOISE_CEILING_RTOL).
  Bounds: FACTOR x that noise per step in loss and grad norm (relative) and per tensor in the
  final masters (absolute, the rms of the tensor's differences: reordering_noise.rms). They were
  |dloss| <= 1e-3 and grad norm within 0.1 relative (measured then 2.3e-4 and 3.6e-3). Part of
  fp16's rounding is the same in every fp16 grouping (the forward's roundings of the same
  weights), more of it than for bf16 here: case / noise ratios under ATEN_CPU_CAPABILITY default,
  avx2 and avx512 (Intel Xeon, AVX-512) 3.47, 3.18, 3.61, in the MLP biases of block 1 (the
  tensors' rms differences are 2-3.6x their noise throughout, the same share everywhere); FACTOR
  leaves 2.2x that. The largest element would be too erratic (8.6, one bias element whose
  gradient is near zero, under Adam). AdamW trains nearly the
  same weights from gradients off by a constant factor, so the norm is what shows a skipped
  unscale or a doubled reduction (planted: the scale not divided out, the norm 65536x off).
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

import numpy as np

import trainer_test_support as ts
from api_test_support import read_safetensors_arrays
from reordering_noise import (LOW_PRECISION_CONTROL_MIN_USAGE, LOW_PRECISION_NOISE_CEILING_RTOL,
                              LOW_PRECISION_UNSEEN, Run, check_controls, derive, differences, fp64_norm_rtol, rms, row)

QUICKSTART = os.path.join(ts.ROOT, "config_templates", "quickstart.yaml")
STEPS = 16  # the last loss under 90% of the first: 0.86 measured (default scale)
MOVING_STEPS = 8  # the MOVING runs (module docstring): two overflow phases and a growth
FAST = ["model.n_embd=64", "training.seq_len=32", "optimizer.lr=1e-2", "scheduler.warmup_steps=6"]
# The resume test's checkpoint: MOVING's scale has moved (two overflows from 2^20, then growth) by then.
STOP = 6
MOVING = ["deepspeed.initial_scale_power=20", "deepspeed.hysteresis=1", "deepspeed.loss_scale_window=3",
          f"training.checkpoint_every={STOP}"]
ROWS = 16  # rows per step: world 2 at micro batch 8


class Fp16(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="accel_fp16_")
        cls.runs = {}

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    def run_job(self, name, stage, precision="fp16", extra=(), steps=STEPS, world=2, accum=1):
        """metrics.jsonl of the job, launched once for every test that reads it (its final fp32
        masters: self.weights[name])."""
        if name in self.runs:
            return self.runs[name]
        out = os.path.join(self.dir, name)
        sets = ["main_process_port=0", f"num_processes={world}", f"training.micro_batch_size={ROWS // world // accum}",
                f"training.gradient_accumulation_steps={accum}", "backend=deepspeed",
                f"deepspeed.zero_stage={stage}", f"mixed_precision={precision}", f"training.max_steps={steps}",
                "training.eval_every=0", f"training.output_dir={out}",
                "training.save_weights=true"] + FAST + list(extra)
        if not any(s.startswith("training.resume=") for s in extra):
            sets.append("training.resume=never")
        # World 1 gets every core's threads: idle ones sleep (ts.QUIET_IDLE_THREADS; the same numbers).
        p = ts.run([ts.ACCEL, "launch", QUICKSTART] + [x for s in sets for x in ("--set", s)], cwd=self.dir,
                   env_extra=ts.QUIET_IDLE_THREADS if world == 1 else None)
        self.assertEqual(p.returncode, 0, ts.describe(p))
        self.runs[name] = ts.read_metrics(out)
        self.weights[name] = read_safetensors_arrays(os.path.join(out, "weights.safetensors"))
        self.assertTrue(all(w.dtype == np.float32 for w in self.weights[name].values()), f"{name}: masters not fp32")
        return self.runs[name]

    weights = {}

    def run_of(self, name, *args, **kwargs):
        """run_job's metrics and final masters as a reordering_noise.Run."""
        metrics = self.run_job(name, *args, **kwargs)
        self.assertEqual([r["step"] for r in metrics], list(range(STEPS)), name)
        self.assertEqual([r["tokens"] for r in metrics], [ROWS * 32] * STEPS, f"{name}: rows per step")
        return Run(metrics, self.weights[name])

    def moving(self, stage):
        return self.run_job(f"moving_s{stage}", stage, extra=MOVING, steps=MOVING_STEPS)

    def test_stages_equal_stage0_and_follow_fp32(self):
        ref = self.moving(0)
        self.assertEqual(len(ref), MOVING_STEPS)
        self.assertTrue(any(r["skipped"] for r in ref) and not all(r["skipped"] for r in ref), ref)
        # the short run still holds a growth, so the stages are compared through every scale event
        self.assertTrue(any(b["loss_scale"] > a["loss_scale"] for a, b in zip(ref, ref[1:])), ref)
        fixed = ("step", "loss", "lr", "loss_scale", "skipped")
        ref_weights = self.weights["moving_s0"]
        n_values = sum(w.size for w in ref_weights.values())
        norm_bound = fp64_norm_rtol(n_values)
        for stage in (1, 2, 3):
            got = self.moving(stage)
            self.assertEqual([{k: r[k] for k in fixed} for r in got], [{k: r[k] for k in fixed} for r in ref],
                             f"zero {stage}")
            got_weights = self.weights[f"moving_s{stage}"]
            self.assertEqual(sorted(got_weights), sorted(ref_weights))
            for k in ref_weights:
                self.assertTrue(np.array_equal(got_weights[k], ref_weights[k]), f"zero {stage}: {k} differs")
            applied = [(a["grad_norm"], b["grad_norm"]) for a, b in zip(got, ref) if not b["skipped"]]
            dnorm = ts.largest_diff((abs(a - b) / b for a, b in applied), f"zero {stage} grad_norm")
            print(f"\n[fp16 zero {stage} vs zero 0, moving scale] identical loss, lr, scale, skips and masters; "
                  f"grad norm rel {dnorm:.3e} / {norm_bound:.3g} over {len(applied)} applied steps "
                  f"(fp64 sums of {n_values} squares in any order)")
            self.assertLessEqual(dnorm, norm_bound, f"zero {stage}")
        fp16 = self.run_of("default_s0", 0)
        self.assertTrue(all(r["loss_scale"] == 65536 and not r["skipped"] for r in fp16.metrics), fp16.metrics)
        self.assertLess(fp16.metrics[-1]["loss"], 0.9 * fp16.metrics[0]["loss"], "fp16 did not train")
        fp32 = self.run_of("fp32", 0, precision="no")
        self.assertNotEqual([r["loss"] for r in fp16.metrics], [r["loss"] for r in fp32.metrics],
                            "fp16 did not change the compute")
        noise_runs = [self.run_of("default_s0_4x2", 0, accum=2), self.run_of("default_s0_w1", 0, world=1)]
        bounds = derive(self, [fp16] + noise_runs, ceiling=LOW_PRECISION_NOISE_CEILING_RTOL, weight_stat=rms)
        diffs = differences(fp16, fp32, "fp16 vs fp32, zero 0", weight_stat=rms)
        print(f"\nfp16 against fp32 (zero 0, world 2), fp16 regrouping (ATEN_CPU_CAPABILITY="
              f"{os.environ.get('ATEN_CPU_CAPABILITY', 'unset')}), {bounds.describe()}:\n"
              f"{row('fp16 vs fp32', diffs, bounds)}\n"
              + check_controls(self, fp32, bounds, LOW_PRECISION_CONTROL_MIN_USAGE, LOW_PRECISION_UNSEEN))
        bounds.check(self, "fp16 vs fp32, zero 0", diffs)

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
