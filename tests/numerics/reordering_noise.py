"""Bounds derived from a computation's own reordering noise, for the tests that compare a sharded or
resumed run with a reference run of the same global batch (issue 49).

Such a run computes the reference's sums in other groupings (per-rank partial sums, accumulation
micro-steps, a collective's order). fp32 rounds each grouping differently, and AdamW carries the
rounding into the weights. Where a gradient is near zero, the rounding passes into the weights
undamped, because AdamW's update m / (sqrt(v) + eps) does not shrink with the gradient. How far that
goes depends on the CPU's kernels (torch's ATEN_CPU_CAPABILITY, the BLAS's blocking), so a fixed bound
tuned on one CPU fails on another (2.9e-5 against 2e-5 on an AVX-512 Xeon). So each test runs its
reference computation again in other groupings of the same rows (noise runs: world 1 at smaller
micro-batches with more accumulation, or another intra-op thread count) and derives:

  noise  the largest difference between any two of those runs, the reference included: losses and
         grad norms relative (largest over the steps), weights absolute (largest per tensor);
  bound  FACTOR x noise, at least FLOOR_ULPS fp32 ulps of the compared values (a grouping that
         happens to round alike, zero noise, must not make a bound no other order can meet).

Near-zero gradients under AdamW need no separate bound here: the noise runs show the same
mechanism in the same tensors (the largest differences of examples/llama sit in its wv weights in
the noise runs and in every strategy alike, under all three capabilities).
"""
import os
from collections import namedtuple

import numpy as np

from trainer_test_support import largest_diff

FP32_ULP = 2.0 ** -23  # fp32's spacing at 1.0: the largest relative spacing of fp32 values
FLOOR_ULPS = 4
# The strategies reassociate the same sums as the noise runs in other groupings (two 4-row
# gradients summed by a collective, 2-row ones in a ring's order), so a case's difference from the
# reference is of the noise's size, not a fixed multiple of it. Measured under ATEN_CPU_CAPABILITY
# default, avx2 and avx512 (AMD EPYC; each test prints its case/noise ratios), the largest ratio
# over the compared quantities (a loss, a grad norm, a weight tensor) was 3.6 (examples/cnn's
# zero3_accum under avx2: its noise runs group the convolutions as the ranks do, SyncBatchNorm's
# backward sums not); 2.5 for test_api_checkpoints, 2.0 for the others (one ulp of noise against
# two); the built-in trainer's against its float64-derived noise (reference_rounding), 2.72
# (ZeroStagesAgreement's world 3 under avx512; 2.58 avx2, 1.99 default; the same AMD EPYC).
# FACTOR is about twice the largest, for kernels not measured here, and far below what a bug
# does (check_controls: a gradient 1% off moves the grad norm by 1e-2, thousands of times its bound).
FACTOR = 8
# The noise runs are the reference's own computation in another grouping: losses or grad norms
# further apart than this (~840 ulps) are not rounding but a bug in that computation (gradients
# twice too large at accumulation 2, rows read twice), and no bound may be derived from them.
NOISE_CEILING_RTOL = 1e-4

# The same for bf16 and fp16 noise runs (8 or 11 significant bits): their gradients are rounded to
# 2^-8 or 2^-11 and AdamW carries that into the weights undamped, so two groupings' grad norms
# drift apart by 0.2-0.45% over the tests' 16-20 steps, bf16 and fp16 alike (the amplification,
# not the format, sets it: test_mixed_precision.py, test_fp16.py). A bug in the noise runs'
# computation moves them far more (a missing accumulation divisor: 100%; a dropped micro-batch:
# tens of %).
LOW_PRECISION_NOISE_CEILING_RTOL = 2e-2

Run = namedtuple("Run", "metrics weights")  # metrics.jsonl records, name -> numpy array


def _relative(metrics, ref_metrics, key, what):
    return largest_diff((abs(a[key] - b[key]) / abs(b[key]) for a, b in zip(metrics, ref_metrics)), what)


def largest(d):
    """A tensor's weight difference: its largest absolute element (`d`: the absolute differences)."""
    return d.max(initial=0.0)


def rms(d):
    """A tensor's weight difference as the root mean square of its elements' (bf16 and fp16 against
    fp32, where single elements whose gradient is near zero carry the largest differences in a few
    elements, noise runs and case alike, but not in the same ones: their largest element is an
    extreme of a handful of values, too erratic to be a yardstick, while the tensor's rms is not)."""
    return float(np.sqrt(np.mean(np.square(d)))) if d.size else 0.0


def differences(run, ref, what, steps=None, weight_stat=largest):
    """(largest relative loss difference, largest relative grad-norm difference, {tensor: its weight
    difference, weight_stat of the absolute element differences}) of `run` against `ref` (Runs),
    over `steps` (default: every step; both runs must have those). NaN or inf fails (largest_diff)."""
    pick = (lambda ms: [r for r in ms if steps is None or r["step"] in steps])
    metrics, ref_metrics = pick(run.metrics), pick(ref.metrics)
    if [r["step"] for r in metrics] != [r["step"] for r in ref_metrics] or not metrics:
        raise AssertionError(f"{what}: steps {[r['step'] for r in metrics]} vs {[r['step'] for r in ref_metrics]}")
    if sorted(run.weights) != sorted(ref.weights):
        raise AssertionError(f"{what}: tensors {sorted(run.weights)} vs {sorted(ref.weights)}")
    weights = {k: largest_diff([weight_stat(np.abs(run.weights[k].astype(np.float64) -
                                                   np.asarray(ref.weights[k], np.float64)))], f"{what}: {k}")
               for k in ref.weights}
    return (_relative(metrics, ref_metrics, "loss", f"{what}: loss"),
            _relative(metrics, ref_metrics, "grad_norm", f"{what}: grad norm"), weights)


class Bounds:
    """Bounds for comparing runs with the reference (losses and grad norms relative, weights absolute
    per tensor). Build with derive(); the constructor takes them as given (unit tests of the checks)."""

    def __init__(self, loss_rtol, grad_norm_rtol, weight_atol, noise=None, factor=None, weight_stat=largest):
        self.loss_rtol, self.grad_norm_rtol, self.weight_atol = loss_rtol, grad_norm_rtol, dict(weight_atol)
        self.noise, self.factor, self.weight_stat = noise, factor, weight_stat

    def check(self, test, name, diffs):
        """Asserts on `test` that differences(...) `diffs` are within the bounds; returns the largest
        share of its bound any quantity uses (above 1: failed)."""
        loss, norm, weights = diffs
        test.assertLessEqual(set(weights), set(self.weight_atol), f"{name}: tensors without a bound")
        test.assertLessEqual(loss, self.loss_rtol, f"{name}: relative loss difference")
        test.assertLessEqual(norm, self.grad_norm_rtol, f"{name}: relative grad-norm difference")
        for k, d in weights.items():
            test.assertLessEqual(d, self.weight_atol[k], f"{name}: {k}, weight difference ({self.weight_stat.__name__} "
                                                         "of the absolute element differences)")
        return self.usage(diffs)

    def usage(self, diffs):
        loss, norm, weights = diffs
        return max([loss / self.loss_rtol, norm / self.grad_norm_rtol] +
                   [d / self.weight_atol[k] for k, d in weights.items()])

    def describe(self):
        """One line: the noise and the bounds derived from it."""
        w = max(self.weight_atol, key=self.weight_atol.get)
        head = "bounds" if self.noise is None else (
            f"noise: loss {self.noise[0]:.3g}, grad norm {self.noise[1]:.3g}, "
            f"weights ({self.weight_stat.__name__}) up to "
            f"{max(self.noise[2].values()):.3g}; bounds (x{self.factor:g}, floor {FLOOR_ULPS} ulps)")
        return (f"{head}: loss {self.loss_rtol:.3g}, grad norm {self.grad_norm_rtol:.3g}, weights "
                f"{min(self.weight_atol.values()):.3g}..{self.weight_atol[w]:.3g} ({w})")


def derive(test, runs, factor=FACTOR, steps=None, ceiling=NOISE_CEILING_RTOL, weight_stat=largest):
    """Bounds from the noise between `runs` (Runs of one computation in other groupings; the first
    is the reference the cases are compared with), each pair compared over `steps` (default all);
    asserts on `test` that the noise is rounding (losses and grad norms within `ceiling`:
    NOISE_CEILING_RTOL for fp32, LOW_PRECISION_NOISE_CEILING_RTOL for bf16 and fp16); weights
    differ by `weight_stat` per tensor (largest, or rms: compare the cases with the same,
    bounds.weight_stat)."""
    assert len(runs) >= 2, "noise needs a second grouping"
    pairs = [differences(runs[j], runs[i], f"noise run {j} vs {i}", steps, weight_stat)
             for i in range(len(runs)) for j in range(i + 1, len(runs))]
    noise = (max(p[0] for p in pairs), max(p[1] for p in pairs),
             {k: max(p[2][k] for p in pairs) for k in runs[0].weights})
    test.assertLessEqual(noise[0], ceiling, "the noise runs' losses differ by more than rounding")
    test.assertLessEqual(noise[1], ceiling, "the noise runs' grad norms differ by more than rounding")
    rel_floor = FLOOR_ULPS * FP32_ULP
    ulp = {k: float(np.spacing(np.float32(np.abs(w).max(initial=0.0)))) for k, w in runs[0].weights.items()}
    return Bounds(max(factor * noise[0], rel_floor), max(factor * noise[1], rel_floor),
                  {k: max(factor * noise[2][k], FLOOR_ULPS * ulp[k]) for k in noise[2]}, noise, factor, weight_stat)


# The built-in trainer's tests (test_trainer_end_to_end.py) compare accel with the Python reference
# (scripts/reference), another implementation, and take their noise from that reference's own
# rounding: its distance from the same reference computed in float64 (same rows, order, steps),
# which no fp32 run rounds alike. Regrouping noise is too small a yardstick there: every world-1
# run, accel's or the reference's, in any micro-batch split or thread count, shares most of its
# rounding (1e-6 relative weight distance between them, each 2.2e-6 from float64), and accel at
# world 3 (a sum of 3 ranks' gradients divided by 3) rounds otherwise: 2.1e-5 from all of them in
# h.1.mlp.c_fc.weight (4x their mutual 5e-6), under every strategy alike, yet 1.4e-6 relative from
# float64, nearer than they are. A case differs from the fp32 reference by at most its own rounding
# error plus the reference's, each about the reference's: case / noise ratios of 2 or so.


def reference_rounding(test, ref32, ref64, factor=FACTOR, steps=None):
    """Bounds (derive) for runs compared with the float32 reference run `ref32`, or with another fp32
    run of its computation, from its difference from `ref64`, the same reference in float64 (Runs;
    ref64's weights in float64; reference_in_process.fp32_and_float64), over `steps` (default all)."""
    return derive(test, [ref32, ref64], factor, steps)


# Grad norms of the same gradient values summed in other orders (test_mixed_precision.py's and
# test_fp16.py's stages at world 2, whose gradients are bitwise equal): accel squares each fp32
# value in fp64, exactly (24 significant bits squared are 48 of fp64's 53), and sums the n squares
# in fp64 (torch's blocking per shard, then the ranks' partial sums). Any order of adding n
# nonnegative terms is within (n - 1) u of the exact sum (u = 2^-53, to first order), so two orders
# within 2 (n - 1) u of each other, which the square root halves, plus the root's own rounding on
# each side; the loss scale divides out exactly (a power of 2). This holds for every kernel and
# summation order, and a gradient 1e-9 off misses it (n ~ 2.4e5: 2.7e-11).
FP64_UNIT_ROUNDOFF = 2.0 ** -53


def fp64_norm_rtol(n_values):
    """The bound above on the relative difference of two grad norms of the same n_values gradient
    values summed in fp64 in any two orders."""
    return (n_values + 1) * FP64_UNIT_ROUNDOFF


# A bug the bounds must catch misses them by far: at least this share of its bound.
CONTROL_MIN_USAGE = 100


def planted_bugs(ref):
    """`ref` (a Run) as three bugs would leave it: (name, Run). Gradients 1% off (a loss or gradient
    scaled by 1.01 on some path) and twice too large (an accumulation divisor missing) show in the
    grad norm only, as AdamW trains nearly the same weights from them; a mis-ordered shard swaps the
    two halves of the largest tensor's values."""
    def norms(scale):
        return ref._replace(metrics=[{**r, "grad_norm": r["grad_norm"] * scale} for r in ref.metrics])
    largest = max(ref.weights, key=lambda k: ref.weights[k].size)
    flat = np.asarray(ref.weights[largest]).reshape(-1)
    half = flat.size // 2
    swapped = np.concatenate([flat[half:2 * half], flat[:half], flat[2 * half:]]).reshape(ref.weights[largest].shape)
    return [("gradients 1% off", norms(1.01)), ("gradients doubled", norms(2.0)),
            (f"{largest} shards swapped", ref._replace(weights={**ref.weights, largest: swapped}))]


# bf16 and fp16 bounds are ~1% in the grad norm (their noise, LOW_PRECISION_NOISE_CEILING_RTOL's
# comment): a gradient 1% off hides in them (the fp32 agreement tests, whose engine paths these
# share, catch it), while one doubled or a shard swapped must still miss by this much.
LOW_PRECISION_CONTROL_MIN_USAGE = 3
LOW_PRECISION_UNSEEN = ("gradients 1% off",)


def check_controls(test, ref, bounds, min_usage=CONTROL_MIN_USAGE, unseen=()):
    """Asserts on `test` that each of planted_bugs(ref) but those named in `unseen` exceeds `bounds`
    by `min_usage` or more; returns one line with the shares of their bounds they use (all)."""
    usages = {name: bounds.usage(differences(run, ref, name, weight_stat=bounds.weight_stat))
              for name, run in planted_bugs(ref)}
    line = "  controls (planted bugs), times their bound: " + ", ".join(f"{k} {v:.3g}" for k, v in usages.items())
    for name, usage in usages.items():
        if name not in unseen:
            test.assertGreaterEqual(usage, min_usage, f"control '{name}' is not far outside the bounds\n{line}")
    return line


def noise_ratio(diffs, bounds):
    """The largest case / noise ratio over the quantities whose bound is FACTOR x noise (not the
    floor): what FACTOR must exceed."""
    loss, norm, weights = diffs
    noise_loss, noise_norm, noise_weights = bounds.noise
    pairs = [(loss, noise_loss, bounds.loss_rtol), (norm, noise_norm, bounds.grad_norm_rtol)] + [
        (d, noise_weights[k], bounds.weight_atol[k]) for k, d in weights.items()]
    return max([d / n for d, n, b in pairs if n > 0 and b == bounds.factor * n] or [0.0])


def row(name, diffs, bounds, width=20):
    """A table row: the case's differences against their bounds (the quantity using most of its
    bound), its largest weight difference, and its case / noise ratio (noise_ratio)."""
    loss, norm, weights = diffs
    w = max(weights, key=lambda k: weights[k] / bounds.weight_atol[k])
    ratio = f"; case/noise {noise_ratio(diffs, bounds):.2f}" if bounds.noise else ""
    return (f"  {name:{width}s} loss {loss:.3g} / {bounds.loss_rtol:.3g}, grad norm {norm:.3g} / "
            f"{bounds.grad_norm_rtol:.3g}, weight {weights[w]:.3g} / {bounds.weight_atol[w]:.3g} ({w}), "
            f"largest weight difference {max(weights.values()):.3g}{ratio}")


def report_agreement(test, worst, ref, bounds, width=20, label="against world 1", low_precision=False):
    """Prints each case's row against world 1 under the CPU kernels in use, and asserts and prints
    the controls (check_controls; a bf16/fp16 comparison's with LOW_PRECISION_*)."""
    print(f"\n{label} (ATEN_CPU_CAPABILITY={os.environ.get('ATEN_CPU_CAPABILITY', 'unset')}), "
          f"{bounds.describe()}:")
    for name, diffs in worst.items():
        print(row(name, diffs, bounds, width))
    if low_precision:
        print(check_controls(test, ref, bounds, LOW_PRECISION_CONTROL_MIN_USAGE, LOW_PRECISION_UNSEEN))
    else:
        print(check_controls(test, ref, bounds))
