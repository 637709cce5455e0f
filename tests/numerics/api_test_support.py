"""What the public API's end-to-end tests share (test_public_api*.py, test_api_checkpoints.py,
test_transports.py): reading a user program's safetensors output, launching a user program
(`program:`) under a strategy with a given world size and batch shape, and comparing a run with
the world-1 reference."""
import json
import os
import struct

import numpy as np

from reordering_noise import Run, differences
from trainer_test_support import ACCEL, describe, largest_diff, read_metrics, run, write_job

# Importing torch costs a test process about 2 s of CPU: tests that only compare values read
# numpy arrays (read_safetensors_arrays); read_safetensors imports torch when first called.
_NUMPY_DTYPES = {"F32": np.dtype("<f4"), "F64": np.dtype("<f8"), "I64": np.dtype("<i8")}

# One intra-op thread in every rank (the launcher's default is cores / local workers): a world-1
# run on 2 cores otherwise gets 2 OpenMP threads, which spin against the other jobs on the machine
# (examples/llama and examples/cnn measured 4 to 8 times slower). World-2 and 4 ranks get one
# thread there anyway, so the world-1 reference then runs each rank's arithmetic as they do.
ONE_THREAD = {"OMP_NUM_THREADS": "1"}


def read_safetensors_arrays(path):
    """name -> numpy array for every tensor of a safetensors file (F32 and I64, what accel writes; F64,
    the float64 reference's weights)."""
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


def read_run(out):
    """The Run (metrics.jsonl records, model.safetensors as numpy arrays) a program left in `out`."""
    return Run(read_metrics(out), read_safetensors_arrays(os.path.join(out, "model.safetensors")))


# The noise runs of a reference at 8 rows per step (reordering_noise.py): the same global batch at
# world 1 in micro-batches of 4 and of 2 with accumulation, the groupings world 2 and world 4 (or
# world 2 with accumulation 2) sum it in.
NOISE_SHAPES = ((4, 2), (2, 4))


def world1_runs(test, launch_world1, shapes):
    """Runs of launch_world1(name, micro, accum) -> (process, out) at each (micro, accum) of
    `shapes`, each asserted to exit 0: the reference first, then its noise runs."""
    runs = []
    for micro, accum in shapes:
        proc, out = launch_world1(f"world1_{micro}x{accum}", micro, accum)
        test.assertEqual(proc.returncode, 0, describe(proc))
        runs.append(read_run(out))
    return runs


def check_against_reference(test, name, out, ref, bounds, steps=None):
    """Asserts on `test` that the run in `out` has the reference's steps (`ref`: a Run) and tensor
    names, per-step losses and pre-clip gradient norms (relative) and final weights (absolute, per
    tensor) within `bounds` (reordering_noise.Bounds), a NaN or inf difference failing; `steps`:
    only those (default all). The gradient norm is there because AdamW hides a gradient's scale:
    gradients twice too large (a missing accumulation divisor, a tied weight's gradients summed
    instead of averaged) train the same weights, and only the norm shows it. Returns the
    differences (reordering_noise.differences)."""
    diffs = differences(read_run(out), ref, name, steps)
    bounds.check(test, name, diffs)
    return diffs
