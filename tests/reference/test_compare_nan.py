"""The comparison code fails on what it cannot vouch for: a NaN or inf value or difference in any
position, a weights file that is missing, nothing to compare. Covers scripts/reference/compare_runs.py,
scripts/peers/crosscheck.py (compare, within) and tests/numerics' largest_diff and
check_against_reference. Pure Python on tiny files, no accel run:

    PYTHONDONTWRITEBYTECODE=1 scripts/python -m unittest discover -s tests/reference -p test_compare_nan.py -v
"""
import contextlib
import io
import json
import math
import os
import sys
import tempfile
import unittest

sys.dont_write_bytecode = True
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
for sub in (("scripts", "reference"), ("scripts", "peers"), ("tests", "numerics")):
    path = os.path.join(ROOT, *sub)
    if path not in sys.path:
        sys.path.insert(0, path)

import numpy as np  # noqa: E402
import torch  # noqa: E402

import api_test_support  # noqa: E402
import reordering_noise  # noqa: E402
import compare_runs  # noqa: E402
import crosscheck  # noqa: E402
import safetensors_io  # noqa: E402
import trainer_test_support  # noqa: E402

NAN, INF = float("nan"), float("inf")
NORMS = [3.0, 2.0, 1.5, 1.0]  # the reference's pre-clip gradient norms per step
LOSSES = [2.0, 1.5, 1.25, 1.0]


def reference_run(w):
    """The reference as check_against_reference takes it: LOSSES and NORMS, the weights `w` as arrays."""
    return reordering_noise.Run([{"step": i + 1, "loss": v, "grad_norm": g} for i, (v, g) in enumerate(zip(LOSSES, NORMS))],
                                {k: np.asarray(v) for k, v in w.items()})


def weights(**over):
    """Three small tensors; `over` replaces single elements: name=(index, value)."""
    w = {"a": torch.zeros(3), "b": torch.ones(2, 2), "c": torch.full((4,), 0.5)}
    for name, (i, v) in over.items():
        w[name].view(-1)[i] = v
    return w


# Fixed bounds for the checks' own behaviour (the agreement tests derive theirs: reordering_noise).
BOUNDS = reordering_noise.Bounds(1e-5, 1e-5, {k: 1e-5 for k in weights()})


def write_run(d, losses=LOSSES, w=None, weights_file="weights.safetensors"):
    """A run directory: metrics.jsonl (step, loss, lr, grad_norm) and, unless w is None, its weights."""
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "metrics.jsonl"), "w") as f:
        for step, loss in enumerate(losses):
            f.write(json.dumps({"step": step, "loss": loss, "lr": 1e-3, "grad_norm": 0.5}) + "\n")
    if w is not None:
        safetensors_io.save_file(w, os.path.join(d, weights_file))
    return d


class CompareRuns(unittest.TestCase):
    def setUp(self):
        tmp = tempfile.TemporaryDirectory(prefix="accel_compare_")
        self.addCleanup(tmp.cleanup)
        self.dir = tmp.name

    def compare(self, a, b, *extra):
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            rc = compare_runs.main([a, b, *extra])
        return rc, out.getvalue()

    def pair(self, losses_a=LOSSES, losses_b=LOSSES, wa=None, wb=None):
        return (write_run(os.path.join(self.dir, "a"), losses_a, weights() if wa is None else wa),
                write_run(os.path.join(self.dir, "b"), losses_b, weights() if wb is None else wb))

    def assertDifferent(self, args, needle=None):
        rc, out = self.compare(*args)
        self.assertEqual(rc, 1, out)
        self.assertIn("DIFFERENT", out)
        if needle:
            self.assertIn(needle, out)

    def test_equal_runs_pass(self):
        rc, out = self.compare(*self.pair())
        self.assertEqual(rc, 0, out)
        self.assertIn("OK", out)

    def test_nan_loss_after_the_first_step_fails(self):
        self.assertDifferent(self.pair(losses_a=[2.0, NAN, 1.25, 1.0]))

    def test_nan_loss_in_both_runs_fails(self):
        nan_at_2 = [2.0, 1.5, NAN, 1.0]
        self.assertDifferent(self.pair(losses_a=nan_at_2, losses_b=list(nan_at_2)))

    def test_inf_loss_in_both_runs_fails(self):
        inf_at_3 = [2.0, 1.5, 1.25, INF]
        self.assertDifferent(self.pair(losses_a=inf_at_3, losses_b=list(inf_at_3)))

    def test_nan_weight_in_a_later_tensor_fails(self):
        self.assertDifferent(self.pair(wa=weights(c=(2, NAN))), "NaN or inf in A's ['c']")

    def test_inf_weight_in_both_runs_fails(self):
        self.assertDifferent(self.pair(wa=weights(b=(1, INF)), wb=weights(b=(1, INF))), "NaN or inf")

    def test_weight_over_tolerance_fails(self):
        self.assertDifferent(self.pair(wb=weights(c=(0, 0.75))))

    def test_missing_weights_file_fails(self):
        a = write_run(os.path.join(self.dir, "a"), w=weights())
        b = write_run(os.path.join(self.dir, "b"))
        self.assertDifferent((a, b), "weights.safetensors missing in B")
        self.assertDifferent((b, a), "weights.safetensors missing in A")

    def test_metrics_only_compares_without_weights(self):
        a, b = write_run(os.path.join(self.dir, "a")), write_run(os.path.join(self.dir, "b"))
        rc, out = self.compare(a, b, "--metrics-only")
        self.assertEqual(rc, 0, out)
        self.assertIn("weights: not compared (--metrics-only)", out)
        a_nan = write_run(os.path.join(self.dir, "a_nan"), losses=[2.0, NAN, 1.25, 1.0])
        self.assertDifferent((a_nan, b, "--metrics-only"))

    def test_key_bias_is_compared_apart_at_its_own_bound(self):
        # h.0.attn.c_attn.bias holds q, k, v biases of 2 elements each: [q q k k v v].
        def with_bias(key=0.0, value=0.0):
            w = weights()
            w["h.0.attn.c_attn.bias"] = torch.tensor([0.0, 0.0, key, key, value, value])
            return w
        key_moved = self.pair(wa=with_bias(), wb=with_bias(key=0.01))
        self.assertDifferent(key_moved)  # one bound for every weight: 0.01 is over 1e-3
        rc, out = self.compare(*key_moved, "--key-bias-tol", "0.05")
        self.assertEqual(rc, 0, out)
        self.assertIn("max |dw| 1.000e-02 (h.0.attn.c_attn.bias[key])", out)
        self.assertDifferent((*key_moved, "--key-bias-tol", "0.005"), "attention key biases apart")
        # The value bias beside it keeps the weights' bound.
        self.assertDifferent((*self.pair(wa=with_bias(), wb=with_bias(value=0.01)), "--key-bias-tol", "0.05"))

    def test_no_step_in_common_fails(self):
        self.assertDifferent(self.pair(losses_a=[], losses_b=[]), "no step to compare")

    def test_largest_ranks_nan_above_inf(self):
        self.assertEqual(compare_runs.largest({"a": 1.0, "b": NAN, "c": INF}), "b")
        self.assertEqual(compare_runs.largest({"a": 1.0, "b": 3.0, "c": 2.0}), "b")
        self.assertFalse(compare_runs.within(NAN, 1.0))
        self.assertFalse(compare_runs.within(INF, INF))
        self.assertTrue(compare_runs.within(1.0, 1.0))


class CrosscheckCompare(unittest.TestCase):
    def runs(self, losses_a=LOSSES, wa=None, wb=None):
        tmp = tempfile.TemporaryDirectory(prefix="accel_crosscheck_")
        self.addCleanup(tmp.cleanup)
        out = []
        for name, losses, w in (("a", losses_a, wa), ("b", LOSSES, wb)):
            path = os.path.join(tmp.name, name + ".safetensors")
            safetensors_io.save_file(weights() if w is None else w, path)
            out.append({"ok": True, "losses": list(losses), "grad_norms": [0.5] * len(losses), "weights_path": path})
        return out

    def test_equal_runs_are_within(self):
        self.assertTrue(crosscheck.within(crosscheck.compare(*self.runs()), crosscheck.TOLERANCES["fp32"]))

    def test_nan_loss_after_the_first_step_is_not_within(self):
        c = crosscheck.compare(*self.runs(losses_a=[2.0, 1.5, NAN, 1.0]))
        self.assertTrue(math.isnan(c["max_dloss"]), c)
        self.assertEqual(c["max_dloss_step"], 2)
        self.assertFalse(crosscheck.within(c, crosscheck.TOLERANCES["fp32"]))

    def test_nan_weight_in_a_later_tensor_is_not_within(self):
        c = crosscheck.compare(*self.runs(wa=weights(c=(3, NAN))))
        self.assertEqual(c["max_dweight_tensor"], "c")
        self.assertFalse(crosscheck.within(c, crosscheck.TOLERANCES["fp32"]))


class NumericsHelpers(unittest.TestCase):
    def test_largest_diff(self):
        self.assertEqual(trainer_test_support.largest_diff(x for x in (1e-7, 3e-7, 2e-7)), 3e-7)
        for diffs in ([0.0, NAN, 1.0], [NAN], [1.0, INF], []):
            with self.subTest(diffs=diffs), self.assertRaises(AssertionError):
                trainer_test_support.largest_diff(diffs)

    def check(self, losses, model, norms=None):
        """check_against_reference of a run with `losses`, grad `norms` (default: the reference's)
        and `model` against LOSSES, NORMS and weights()."""
        tmp = tempfile.TemporaryDirectory(prefix="accel_check_")
        self.addCleanup(tmp.cleanup)
        norms = NORMS if norms is None else norms
        with open(os.path.join(tmp.name, "metrics.jsonl"), "w") as f:
            f.writelines(json.dumps({"step": i + 1, "loss": v, "grad_norm": g}) + "\n"
                         for i, (v, g) in enumerate(zip(losses, norms)))
        safetensors_io.save_file(model, os.path.join(tmp.name, "model.safetensors"))
        return api_test_support.check_against_reference(self, "run", tmp.name, reference_run(weights()), BOUNDS)

    def test_check_against_reference_passes_equal_runs(self):
        self.assertEqual(self.check(LOSSES, weights()), (0.0, 0.0, {"a": 0.0, "b": 0.0, "c": 0.0}))

    def test_check_against_reference_fails_a_later_nan(self):
        with self.assertRaises(AssertionError):
            self.check([2.0, 1.5, NAN, 1.0], weights())
        with self.assertRaises(AssertionError):
            self.check(LOSSES, weights(c=(1, NAN)))
        with self.assertRaises(AssertionError):
            self.check(LOSSES, weights(), norms=[3.0, 2.0, NAN, 1.0])

    def test_check_against_reference_fails_inf(self):
        with self.assertRaises(AssertionError):
            self.check([2.0, 1.5, 1.25, INF], weights())

    def test_check_against_reference_fails_a_doubled_gradient(self):
        # Same losses and weights (what AdamW gives with gradients twice too large), norms 2x.
        with self.assertRaises(AssertionError):
            self.check(LOSSES, weights(), norms=[2 * g for g in NORMS])

    def test_numpy_reader_matches_the_torch_reader(self):
        # The public API tests read accel's output as numpy arrays, the other numerics tests as tensors.
        tmp = tempfile.TemporaryDirectory(prefix="accel_read_")
        self.addCleanup(tmp.cleanup)
        path = os.path.join(tmp.name, "model.safetensors")
        tensors = {**weights(c=(2, -1.5e-30)), "steps": torch.tensor(7), "ids": torch.arange(-2, 4).reshape(2, 3)}
        safetensors_io.save_file(tensors, path)
        arrays = api_test_support.read_safetensors_arrays(path)
        back = api_test_support.read_safetensors(path)
        self.assertEqual(list(arrays), list(tensors))
        self.assertEqual(list(back), list(tensors))
        for k, t in tensors.items():
            self.assertEqual(arrays[k].shape, tuple(t.shape), k)
            self.assertTrue(torch.equal(torch.from_numpy(arrays[k].copy()), t), k)
            self.assertTrue(torch.equal(back[k], t), k)

    def test_check_against_reference_with_numpy_reference_weights(self):
        as_arrays = {k: v.numpy() for k, v in weights().items()}
        tmp = tempfile.TemporaryDirectory(prefix="accel_check_")
        self.addCleanup(tmp.cleanup)
        reference = [{"step": i + 1, "loss": v, "grad_norm": g} for i, (v, g) in enumerate(zip(LOSSES, NORMS))]
        for model, fails in ((weights(), False), (weights(c=(3, NAN)), True), (weights(b=(1, 1.0 + 2e-5)), True)):
            with self.subTest(fails=fails):
                with open(os.path.join(tmp.name, "metrics.jsonl"), "w") as f:
                    f.writelines(json.dumps(r) + "\n" for r in reference)
                safetensors_io.save_file(model, os.path.join(tmp.name, "model.safetensors"))
                if fails:
                    with self.assertRaises(AssertionError):
                        api_test_support.check_against_reference(self, "run", tmp.name, reference_run(as_arrays), BOUNDS)
                else:
                    self.assertEqual(api_test_support.check_against_reference(
                        self, "run", tmp.name, reference_run(as_arrays), BOUNDS), (0.0, 0.0, {"a": 0.0, "b": 0.0, "c": 0.0}))

    def test_derived_bounds_follow_the_noise_and_catch_the_planted_bugs(self):
        # Three runs of one computation in other groupings: the bounds are FACTOR x their largest
        # difference (per tensor for weights), at least the floor; the planted bugs miss by far.
        with_d = lambda w: {**w, "d": torch.arange(8.0)}  # the largest tensor: its halves swapped below
        runs = [reference_run(with_d(weights())), reference_run(with_d(weights(c=(1, 0.5 + 1e-6)))),
                reference_run(with_d(weights(c=(2, 0.5 - 2e-6))))]
        runs[2] = runs[2]._replace(metrics=[{**r, "grad_norm": r["grad_norm"] * (1 + 1e-6)} for r in runs[2].metrics])
        bounds = reordering_noise.derive(self, runs)
        c = [r.weights["c"].astype(np.float64) for r in runs]  # elements 1 and 2 moved: pairs 1-2 differ most
        self.assertEqual(bounds.weight_atol["c"], reordering_noise.FACTOR * np.abs(c[2] - c[0]).max())
        self.assertAlmostEqual(bounds.grad_norm_rtol, reordering_noise.FACTOR * 1e-6, delta=1e-12)
        floor = reordering_noise.FLOOR_ULPS * reordering_noise.FP32_ULP
        self.assertEqual(bounds.loss_rtol, floor)  # no loss noise: the floor
        self.assertEqual(bounds.weight_atol["a"], reordering_noise.FLOOR_ULPS * float(np.spacing(np.float32(0))))
        reordering_noise.check_controls(self, runs[0], bounds)
        # Noise beyond rounding (gradients twice too large in one grouping) derives no bound.
        doubled = runs[1]._replace(metrics=[{**r, "grad_norm": 2 * r["grad_norm"]} for r in runs[1].metrics])
        with self.assertRaises(AssertionError):
            reordering_noise.derive(self, [runs[0], doubled])

if __name__ == "__main__":
    unittest.main()
