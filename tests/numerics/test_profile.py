"""`accel launch --profile DIR` end to end: a world-2 ZeRO-3 run of the built-in trainer records its
steps 3 to 5 (the default window: 3 steps after 2 of warm-up) with torch's profiler, one Chrome
trace per rank; the traces hold those steps' spans and the forward, backward and optimizer
operators inside them; recording changes none of the run's numbers; a resumed run records what is
left of its window; and bad --profile options stop the launch with exit 2 before anything runs.

Run: ACCEL_BINARY=build/accel python -m unittest -v test_profile (from tests/numerics).
"""
import json
import os
import sys
import tempfile
import unittest

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import trainer_test_support as ts  # noqa: E402

STEPS = 6
WORLD = 2


def zero3_job(out):
    job = ts.job(out, world=WORLD, steps=STEPS, eval_every=0)
    job["data"] = {"kind": "synthetic"}
    job["backend"] = "deepspeed"
    job["deepspeed"] = {"zero_stage": 3}
    return job


def launch(job_path, *args):
    return ts.run([ts.ACCEL, "launch", job_path, *args], cwd=os.path.dirname(job_path))


class ProfileSteps(unittest.TestCase):
    """The traces hold the window's steps and their operators; the run's numbers are unchanged."""

    @classmethod
    def setUpClass(cls):
        cls._tmp = tempfile.TemporaryDirectory(prefix="accel_profile_")
        cls.root = cls._tmp.name

    @classmethod
    def tearDownClass(cls):
        cls._tmp.cleanup()

    def test_window_traces_and_numbers(self):
        runs = {}
        for name, extra in (("plain", ()), ("profiled", ("--profile", os.path.join(self.root, "traces")))):
            out = os.path.join(self.root, name)
            job_path = ts.write_job(os.path.join(self.root, name + ".yaml"), zero3_job(out))
            p = launch(job_path, *extra)
            self.assertEqual(p.returncode, 0, ts.describe(p))
            runs[name] = (out, p)
        self.assertIn("--profile: steps 3 to 5", runs["profiled"][1].stderr + runs["profiled"][1].stdout)
        # Recording observes: the same losses, norms and learning rates, bit for bit.
        self.assertEqual(ts.without_timing(ts.read_metrics(runs["plain"][0])),
                         ts.without_timing(ts.read_metrics(runs["profiled"][0])))
        for rank in range(WORLD):
            path = os.path.join(self.root, "traces", f"rank{rank}.pt.trace.json")
            with open(path) as f:
                events = json.load(f)["traceEvents"]
            spans = sorted((e for e in events if e.get("name", "").startswith("ProfilerStep#")), key=lambda e: e["ts"])
            self.assertEqual([e["name"] for e in spans], ["ProfilerStep#3", "ProfilerStep#4", "ProfilerStep#5"], path)
            start, end = spans[0]["ts"], spans[-1]["ts"] + spans[-1]["dur"]
            inside = {e["name"] for e in events if e.get("ph") == "X" and start <= e.get("ts", -1) <= end}
            # The forward's matrix products, the backward's autograd nodes and AdamW's update.
            self.assertTrue(inside & {"aten::mm", "aten::addmm", "aten::matmul", "aten::linear"}, sorted(inside)[:40])
            self.assertTrue(any(n.endswith("Backward0") for n in inside), sorted(inside)[:40])
            self.assertTrue(inside & {"aten::addcdiv_", "aten::_fused_adamw_", "aten::lerp_", "aten::sqrt"},
                            sorted(inside)[:40])

    def test_resumed_run_records_what_is_left(self):
        out = os.path.join(self.root, "resumed")
        job_path = ts.write_job(os.path.join(self.root, "resumed.yaml"), zero3_job(out))
        p = launch(job_path)  # 6 steps, the checkpoint at the end
        self.assertEqual(p.returncode, 0, ts.describe(p))
        traces = os.path.join(self.root, "resumed_traces")
        p = launch(job_path, "--set", "training.max_steps=8", "--profile", traces, "--profile-steps", "2:7")
        self.assertEqual(p.returncode, 0, ts.describe(p))
        self.assertIn("--profile: steps 7 to 7", p.stdout + p.stderr)
        with open(os.path.join(traces, "rank0.pt.trace.json")) as f:
            spans = [e["name"] for e in json.load(f)["traceEvents"] if e.get("name", "").startswith("ProfilerStep#")]
        self.assertEqual(spans, ["ProfilerStep#7"])
        late = os.path.join(self.root, "late_traces")
        p = launch(job_path, "--set", "training.max_steps=10", "--profile", late, "--profile-steps", "2:5")
        self.assertEqual(p.returncode, 0, ts.describe(p))
        self.assertIn("--profile: steps 2 to 5 were done before this run resumed at step 9: nothing recorded",
                      p.stdout + p.stderr)
        self.assertFalse(os.path.exists(late))

    def test_bad_options_stop_the_launch(self):
        job_path = ts.write_job(os.path.join(self.root, "bad.yaml"), zero3_job(os.path.join(self.root, "bad")))
        traces = os.path.join(self.root, "never")
        cases = (
            (("--profile-steps", "3:5"), "--profile-steps needs --profile DIR"),
            (("--profile", traces, "--profile-steps", "3-5"), "not two step numbers A:B"),
            (("--profile", traces, "--profile-steps", f"4:{STEPS + 1}"), f"outside the job's steps 1..{STEPS}"),
            (("--profile", traces, "--profile-steps", "0:2"), "outside the job's steps"),
        )
        for args, message in cases:
            with self.subTest(args=args):
                p = launch(job_path, *args)
                self.assertEqual(p.returncode, 2, ts.describe(p))
                self.assertIn(message, p.stderr)
        self.assertFalse(os.path.exists(traces))
        self.assertFalse(os.path.exists(os.path.join(self.root, "bad")), "a refused launch ran")


if __name__ == "__main__":
    unittest.main()
