"""What the public API's end-to-end tests share (test_public_api*.py, test_api_checkpoints.py,
test_transports.py): reading a user program's safetensors output, launching a user program
(`program:`) under a strategy with a given world size and batch shape, and comparing a run with
the world-1 reference."""
import json
import os
import struct

import numpy as np

from trainer_test_support import ACCEL, largest_diff, read_metrics, run, write_job

# Importing torch costs a test process about 2 s of CPU: tests that only compare values read
# numpy arrays (read_safetensors_arrays); read_safetensors imports torch when first called.
_NUMPY_DTYPES = {"F32": np.dtype("<f4"), "I64": np.dtype("<i8")}

# One intra-op thread in every rank (the launcher's default is cores / local workers): a world-1
# run on 2 cores otherwise gets 2 OpenMP threads, which spin against the other jobs on the machine
# (examples/llama and examples/cnn measured 4 to 8 times slower). World-2 and 4 ranks get one
# thread there anyway, so the world-1 reference then runs each rank's arithmetic as they do.
ONE_THREAD = {"OMP_NUM_THREADS": "1"}


def read_safetensors_arrays(path):
    """name -> numpy array for every tensor of a safetensors file (F32 and I64, what accel writes)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        assert info["dtype"] in _NUMPY_DTYPES, (path, name, info["dtype"])
        out[name] = np.frombuffer(data[begin:end], dtype=_NUMPY_DTYPES[info["dtype"]]).reshape(info["shape"])
    return out


def read_safetensors(path):
    """name -> torch tensor for every tensor of a safetensors file (F32 and I64, what accel writes)."""
    import torch
    return {name: torch.from_numpy(a.copy()) for name, a in read_safetensors_arrays(path).items()}


def program_job(program, out, world, micro, accum, steps, strategy):
    """A job running `program` at `world` ranks, `micro` rows x `accum` micro-steps, `steps` steps."""
    j = {
        "program": [program],
        "num_processes": world,
        "device": "cpu",
        "main_process_port": 0,
        "collective_timeout_s": 60,
        "rendezvous_timeout_s": 60,
        "training": {"micro_batch_size": micro, "gradient_accumulation_steps": accum, "max_steps": steps,
                     "seed": 1, "output_dir": out},
    }
    j.update(strategy)
    return j


def launch_program(tmp, name, program, world, micro, accum, steps, strategy, env_extra=None):
    """`accel launch` of program_job(...) with output in tmp/name, `env_extra` added to the
    environment: (the finished process, the output dir)."""
    out = os.path.join(tmp, name)
    path = write_job(os.path.join(tmp, name + ".yaml"), program_job(program, out, world, micro, accum, steps, strategy))
    return run([ACCEL, "launch", path], cwd=tmp, env_extra=env_extra), out


def largest_relative_diff(metrics, ref_metrics, key, what):
    """The largest |a - b| / |b| of field `key` over metrics records paired step by step (largest_diff:
    NaN or inf fails)."""
    return largest_diff((abs(a[key] - b[key]) / abs(b[key]) for a, b in zip(metrics, ref_metrics)), what)


def weight_rnorm(weights, ref):
    """||weights - ref|| / ||ref|| over every tensor of the dict `ref` (summed in float64)."""
    num = sum(((weights[k].astype(np.float64) - ref[k]) ** 2).sum().item() for k in ref)
    return (num / sum((ref[k].astype(np.float64) ** 2).sum().item() for k in ref)) ** 0.5


def check_bf16_against_world1(test, worst, name, metrics, weights, ref_metrics, ref_weights):
    """One bf16 run against the same program's bf16 run at world 1: records in worst[name] its largest
    relative loss difference, relative grad-norm difference and relative weight-difference norm, and
    asserts each within the test's LOSS_RTOL, GRAD_NORM_RTOL and WEIGHT_RNORM."""
    losses, ref_losses = [r["loss"] for r in metrics], [r["loss"] for r in ref_metrics]
    worst[name] = (largest_diff((abs(a - b) / b for a, b in zip(losses, ref_losses)), name),
                   largest_relative_diff(metrics, ref_metrics, "grad_norm", f"{name}: grad norm"),
                   weight_rnorm(weights, ref_weights))
    test.assertLessEqual(worst[name][0], test.LOSS_RTOL, f"{losses} vs {ref_losses}")
    test.assertLessEqual(worst[name][1], test.GRAD_NORM_RTOL)
    test.assertLessEqual(worst[name][2], test.WEIGHT_RNORM)


def print_bf16_table(worst, width):
    print("\nbf16: largest relative loss difference / relative grad-norm difference / relative "
          "weight-difference norm against bf16 at world 1:")
    for name, (l, g, w) in worst.items():
        print(f"  {name:{width}s} {l:.3g} {g:.3g} {w:.3g}")


def check_against_reference(test, name, out, ref_metrics, ref_weights, loss_rtol, grad_norm_rtol, weight_atol):
    """Asserts on `test` that the run in `out` has the reference's steps (ref_metrics: its
    metrics.jsonl records) and tensor names, per-step losses within loss_rtol and pre-clip gradient
    norms within grad_norm_rtol (both relative), final weights within weight_atol (absolute), a NaN
    or inf difference failing (largest_diff). The gradient norm is there because AdamW hides a
    gradient's scale: gradients twice too large (a missing accumulation divisor, a tied weight's
    gradients summed instead of averaged) train the same weights, and only the norm shows it.
    Returns (largest relative loss difference, largest relative grad-norm difference, largest
    absolute weight difference)."""
    metrics = read_metrics(out)
    test.assertEqual([r["step"] for r in metrics], [r["step"] for r in ref_metrics], name)
    loss_diff = largest_relative_diff(metrics, ref_metrics, "loss", f"{name}: relative loss diff")
    norm_diff = largest_relative_diff(metrics, ref_metrics, "grad_norm", f"{name}: relative grad-norm diff")
    weights = read_safetensors_arrays(os.path.join(out, "model.safetensors"))
    test.assertEqual(sorted(weights), sorted(ref_weights))
    # ref_weights: numpy arrays or torch tensors (np.asarray shares a CPU tensor's memory).
    weight_diff = largest_diff((abs(weights[k] - np.asarray(ref_weights[k])).max().item() for k in weights),
                               f"{name}: weight diff")
    test.assertLessEqual(loss_diff, loss_rtol,
                         f"{name}: losses {[r['loss'] for r in metrics]} vs {[r['loss'] for r in ref_metrics]}")
    test.assertLessEqual(norm_diff, grad_norm_rtol, f"{name}: grad norms {[r['grad_norm'] for r in metrics]} vs "
                                                    f"{[r['grad_norm'] for r in ref_metrics]}")
    test.assertLessEqual(weight_diff, weight_atol, name)
    return loss_diff, norm_diff, weight_diff
