"""The Python reference tools (scripts/reference) called as functions in the test process.

Same command lines, code and outputs as trainer_test_support's make_tokens, export_init and
reference_train, which start an interpreter for each call: each of those imports
torch again (about 2 s of CPU on the 2-core development machine), more than a world-2 accel run of
the tiny test model costs. Here torch is imported once per test process, at the first call (a test
class that uses none of these does not import it). The reference computes with one thread
(--threads 1, as the subprocess helpers pass).
"""
import contextlib
import importlib
import io
import os
import subprocess
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import trainer_test_support as ts  # noqa: E402


def _call(tool, args):
    """scripts/reference/<tool>.py's main(args) with its stdout and stderr captured: a
    CompletedProcess, as ts.run returns."""
    if ts.REF not in sys.path:
        sys.path.insert(0, ts.REF)
    main = importlib.import_module(tool).main
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return subprocess.CompletedProcess([tool + ".py"] + list(args), code, out.getvalue(), err.getvalue())


def _checked(tool, args):
    p = _call(tool, args)
    if p.returncode != 0:
        raise RuntimeError(f"{tool}.py {' '.join(args[:2])} failed: " + ts.describe(p))
    return p


def make_tokens(path, n=100000, seed=1, vocab=256):
    _checked("make_tokens", ["--out", path, "--n", str(n), "--vocab", str(vocab), "--seed", str(seed)])
    return path


def export_init(path, model=ts.MODEL, seed=1337):
    _checked("reference_train",
             ["--n-layer", str(model["n_layer"]), "--n-head", str(model["n_head"]), "--n-embd", str(model["n_embd"]),
              "--vocab-size", str(model["vocab_size"]), "--block-size", str(model["block_size"]),
              "--seed-init", str(seed), "--steps", "0", "--export-init", path, "--quiet", "--threads", "1"])
    return path


def reference_train(job_path, out_dir, init_weights, world, micro, accum, dtype="float32"):
    """dtype float64 also writes weights_float64.safetensors (reordering_noise.reference_rounding)."""
    _checked("reference_train",
             ["--job", job_path, "--init-weights", init_weights, "--world", str(world), "--micro-batch", str(micro),
              "--accum", str(accum), "--out-dir", out_dir, "--quiet", "--threads", "1", "--dtype", dtype])
    return out_dir


def fp32_and_float64(job_path, out_dir, init_weights, world, micro, accum):
    """The reference run of `job_path` at (world, micro, accum) in fp32 (into out_dir; kept when it is
    there already) and in float64 (out_dir + "_float64"): their reordering_noise.Runs, fp32 first,
    the arguments of reordering_noise.reference_rounding (the float64 run's weights in float64)."""
    from api_test_support import read_safetensors_arrays
    from reordering_noise import Run
    runs = []
    for dtype, out, weights in (("float32", out_dir, "weights.safetensors"),
                                ("float64", out_dir + "_float64", "weights_float64.safetensors")):
        if not os.path.exists(os.path.join(out, weights)):
            reference_train(job_path, out, init_weights, world, micro, accum, dtype)
        runs.append(Run(ts.read_metrics(out), read_safetensors_arrays(os.path.join(out, weights))))
    return runs
