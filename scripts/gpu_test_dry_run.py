#!/usr/bin/env python3
"""tests/gpu/test_cuda_engine.py's comparisons run on the CPU (device: cpu), to check the test's own
logic (jobs, overrides, reference comparisons, tolerances) before a GPU lease spends time on it.
Not a GPU test and not part of ctest: on the CPU the device-only wording ("on cuda:0", "layer
buffers", "copied asynchronously") and the GPU memory comparisons are not checked, and
optimizer.fused is forced on where a test does not set it, as auto does on a GPU.

  ACCEL_BINARY=build/accel scripts/python scripts/gpu_test_dry_run.py [test_name ...]
"""
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "gpu"))
import test_cuda_engine as gpu  # noqa: E402

DEVICE_ONLY = ("on cuda:0", "layer buffers", "copied asynchronously", "in pinned host memory",
               "issues every collective through NCCL")


class OnCpu(gpu.CudaEngine):
    def train(self, name, sets=(), world=1, device="cpu", env=None):
        sets = list(sets)
        if not any(s.startswith("optimizer.fused") for s in sets):
            sets.append("optimizer.fused=true")  # what auto picks on a GPU
        return super().train(name, sets, world, device="cpu", env=env)

    def assertIn(self, member, container, msg=None):
        if member not in DEVICE_ONLY:
            super().assertIn(member, container, msg)

    def assertNotIn(self, member, container, msg=None):
        if member != "fused AdamW":  # the dry run forces fused on everywhere but where a test sets it
            super().assertNotIn(member, container, msg)

    def assert_peak_below(self, runs, than, msg, strict=True):  # GPU memory: not measured on the CPU
        pass


if __name__ == "__main__":
    names = sys.argv[1:] or [n for n in dir(gpu.CudaEngine) if n.startswith("test_")]
    suite = unittest.TestSuite(OnCpu(n) for n in names)
    sys.exit(0 if unittest.TextTestRunner(verbosity=2).run(suite).wasSuccessful() else 1)
