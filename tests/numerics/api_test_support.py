"""What the public API's end-to-end tests share (test_public_api.py, test_public_api_units.py,
test_api_checkpoints.py): reading a user program's safetensors output, and launching a user
program (`program:`) under a strategy with a given world size and batch shape."""
import json
import os
import struct

import torch

from trainer_test_support import ACCEL, run, write_job

_DTYPES = {"F32": torch.float32, "I64": torch.int64}


def read_safetensors(path):
    """name -> tensor for every tensor of a safetensors file (F32 and I64, what accel writes)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        assert info["dtype"] in _DTYPES, (path, name, info["dtype"])
        out[name] = torch.frombuffer(bytearray(data[begin:end]), dtype=_DTYPES[info["dtype"]]).reshape(info["shape"])
    return out


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


def launch_program(tmp, name, program, world, micro, accum, steps, strategy):
    """`accel launch` of program_job(...) with output in tmp/name: (the finished process, the output dir)."""
    out = os.path.join(tmp, name)
    path = write_job(os.path.join(tmp, name + ".yaml"), program_job(program, out, world, micro, accum, steps, strategy))
    return run([ACCEL, "launch", path], cwd=tmp), out
