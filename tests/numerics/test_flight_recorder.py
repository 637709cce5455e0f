"""The collective flight recorder end to end (docs/design/0025): one launch per fault kind through the
real launcher and the built-in trainer on CPU Gloo (shared memory), each with a short collective
timeout. ACCEL_FAULT makes rank 1 skip the first all_reduce of step 2, issue a barrier instead,
issue it on half the tensor, stop (SIGSTOP) there, or issue it twice the timeout late. The launcher
must print a diagnosis that names rank 1 and the op, within collective_timeout_s + 5 s of the fault,
write it beside every rank's records in <output_dir>/flight/, and leave no process behind.
Each case prints its time and diagnosis to stderr (the fault matrix).

Run: ACCEL_BINARY=build/accel python -m unittest -v test_flight_recorder (from tests/numerics).
"""
import os
import sys
import tempfile
import unittest

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import trainer_test_support as ts  # noqa: E402
from watched_launch import job_processes, watched_launch  # noqa: E402

TIMEOUT_S = 3  # collective_timeout_s: short, so every case ends within seconds
GRACE_S = 2    # shutdown_grace_s
# The goal: the diagnosis is printed within the collective timeout plus this of the fault.
DIAGNOSIS_MARGIN_S = 5
STEPS = 4      # the fault is in step 2; a run that ignored it would end after step 3


def run_with_fault(tokens, out, world, fault):
    """`accel launch` of a short ddp job with ACCEL_FAULT=`fault`. Returns (CompletedProcess, seconds
    from the ACCEL_FAULT line to the first diagnosis line (None when either is missing), the pids of
    the run's processes seen while it ran)."""
    job = ts.job(out, data_path=tokens, world=world, steps=STEPS, eval_every=0)
    job["collective_timeout_s"] = TIMEOUT_S
    job["shutdown_grace_s"] = GRACE_S
    job_path = ts.write_job(os.path.join(os.path.dirname(out), "job.yaml"), job)
    proc, times, seen = watched_launch(job_path, out, {"ACCEL_FAULT": fault}, {
        "fault": lambda line: "ACCEL_FAULT:" in line,
        "diagnosis": lambda line: line.startswith("[flight] diagnosis:")})
    elapsed = times["diagnosis"] - times["fault"] if "fault" in times and "diagnosis" in times else None
    return proc, elapsed, seen


class FlightRecorderFaults(unittest.TestCase):
    """Each fault kind is diagnosed with the right rank and op, in time, with nothing left running."""

    @classmethod
    def setUpClass(cls):
        cls._tmp = tempfile.TemporaryDirectory(prefix="accel_flight_")
        cls.tokens = ts.make_tokens(os.path.join(cls._tmp.name, "tok.bin"))

    @classmethod
    def tearDownClass(cls):
        cls._tmp.cleanup()

    def diagnose(self, name, world, fault, headline):
        """Runs the fault; checks the diagnosis' first line starts with `headline`; returns it."""
        out = os.path.join(self._tmp.name, name, "out")
        os.makedirs(os.path.dirname(out))
        p, elapsed, seen = run_with_fault(self.tokens, out, world, fault)
        self.assertEqual(p.returncode, 1, ts.describe(p))
        lines = [line for line in p.stderr.splitlines() if line.startswith("[flight] ")]
        diagnosis = "\n".join(lines)
        print(f"\n[{name}] ACCEL_FAULT={fault} (world {world}, collective_timeout_s {TIMEOUT_S}): diagnosis "
              f"{elapsed if elapsed is None else round(elapsed, 2)} s after the fault\n{diagnosis}", file=sys.stderr)
        self.assertIsNotNone(elapsed, f"no fault line or no diagnosis\n{ts.describe(p)}")
        self.assertTrue(lines[0].startswith("[flight] diagnosis: " + headline), diagnosis)
        self.assertLessEqual(elapsed, TIMEOUT_S + DIAGNOSIS_MARGIN_S)
        # One line per rank, and the diagnosis written beside the ranks' records (a stopped rank has none).
        for r in range(world):
            self.assertTrue(any(line.startswith(f"[flight] rank {r} ") for line in lines), diagnosis)
            if "stopped" not in name or r != 1:
                self.assertTrue(os.path.exists(os.path.join(out, "flight", f"rank{r}.json")), f"rank {r}'s records")
        with open(os.path.join(out, "flight", "diagnosis.txt")) as f:
            written = f.read().splitlines()
        self.assertEqual(["[flight] " + line for line in written], lines[:len(written)])
        # Nothing left: the watch saw the workers, so an empty answer now means they are gone.
        self.assertGreaterEqual(len(seen), world, "the process watch missed the workers")
        self.assertEqual(job_processes(out), [], "processes of the run left behind")
        for pid in seen:
            self.assertFalse(os.path.exists(f"/proc/{pid}"), f"pid {pid} is still there")
        return lines[0]

    # Step 2's first all_reduce is the ddp gradient bucket (float32); the next is the loss (1 float64).

    def test_skipped_collective(self):
        # Rank 1's seq is one ahead: its loss all_reduce meets the others' gradients, and shared memory
        # refuses the mismatch at once.
        line = self.diagnose("skip", 3, "1:skip_collective:2", "rank 1 diverged at seq ")
        self.assertRegex(line, r"\(another (dtype|size)\): it issued all_reduce of 1 float64 \(8 B\) where ranks 0 "
                               r"and 2 issued all_reduce of \d+ float32")

    def test_other_op(self):
        # Its barrier (TCP) and their all_reduce (shared memory) never meet: all time out.
        line = self.diagnose("other_op", 3, "1:other_op_in_collective:2", "rank 1 diverged at seq ")
        self.assertRegex(line, r"\(another op\): it issued barrier where ranks 0 and 2 issued all_reduce of \d+ float32")

    def test_other_size(self):
        line = self.diagnose("other_size", 3, "1:other_size_in_collective:2", "rank 1 diverged at seq ")
        self.assertRegex(line, r"\(another size\): it issued all_reduce of (\d+) float32 .* where ranks 0 and 2 issued "
                               r"all_reduce of \d+ float32")

    def test_stopped_rank(self):
        # A stopped rank cannot write its records (the launcher does not continue it): rank 0's name the op.
        line = self.diagnose("stopped", 2, "1:hang_in_collective:2",
                             "rank 1 was stopped (process state T: SIGSTOP or SIGTSTP) and left no records")
        self.assertRegex(line, r"; rank 0 was in all_reduce of \d+ float32 .* \(seq \d+ of group world\), waiting for it; "
                               r"the last op it completed is seq \d+")

    def test_slow_rank(self):
        line = self.diagnose("slow", 2, "1:slow_collective:2", "rank 1 is behind: it never issued seq ")
        self.assertRegex(line, r", all_reduce of \d+ float32 .*; it is running outside any collective")


if __name__ == "__main__":
    unittest.main()
