"""The Python reference tools (scripts/reference) called as functions in the test process.

Same command lines, code and outputs as trainer_test_support's make_tokens, export_init,
reference_train and compare_runs, which start an interpreter for each call: each of those imports
torch again (about 2 s of CPU on the 2-core development machine), more than a world-2 accel run of
the tiny test model costs. Here torch is imported once per test process. The reference computes
with one thread (--threads 1, as the subprocess helpers pass).
"""
import contextlib
import io
import os
import subprocess
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import trainer_test_support as ts  # noqa: E402

if ts.REF not in sys.path:
    sys.path.insert(0, ts.REF)

import compare_runs as _compare_runs  # noqa: E402
import make_tokens as _make_tokens  # noqa: E402
import reference_train as _reference_train  # noqa: E402


def _call(main, args):
    """main(args) with its stdout and stderr captured: a CompletedProcess, as ts.run returns."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return subprocess.CompletedProcess([main.__module__] + list(args), code, out.getvalue(), err.getvalue())


def _checked(main, args, what):
    p = _call(main, args)
    if p.returncode != 0:
        raise RuntimeError(f"{what} failed: " + ts.describe(p))
    return p


def make_tokens(path, n=100000, seed=1, vocab=256):
    _checked(_make_tokens.main, ["--out", path, "--n", str(n), "--vocab", str(vocab), "--seed", str(seed)],
             "make_tokens.py")
    return path


def export_init(path, model=ts.MODEL, seed=1337):
    _checked(_reference_train.main,
             ["--n-layer", str(model["n_layer"]), "--n-head", str(model["n_head"]), "--n-embd", str(model["n_embd"]),
              "--vocab-size", str(model["vocab_size"]), "--block-size", str(model["block_size"]),
              "--seed-init", str(seed), "--steps", "0", "--export-init", path, "--quiet", "--threads", "1"],
             "reference_train.py --export-init")
    return path


def reference_train(job_path, out_dir, init_weights, world, micro, accum):
    _checked(_reference_train.main,
             ["--job", job_path, "--init-weights", init_weights, "--world", str(world), "--micro-batch", str(micro),
              "--accum", str(accum), "--out-dir", out_dir, "--quiet", "--threads", "1"], "reference_train.py")
    return out_dir


def compare_runs(a, b, loss_tol, weight_tol):
    return _call(_compare_runs.main, [a, b, "--loss-tol", repr(loss_tol), "--weight-tol", repr(weight_tol)])
