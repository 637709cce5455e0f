"""Faults inside a collective, through the real launcher and the built-in trainer on CPU Gloo.

ACCEL_FAULT=<rank>:hang_in_collective:<step> SIGSTOPs that rank as it issues the first collective of
<step> (a frozen rank that never takes part); die_in_collective SIGKILLs it there. The job must end
within collective_timeout_s + shutdown_grace_s (plus a stated margin), exit 1 with a summary that
names the failing rank, the op and the frozen rank, and leave no process and no shared-memory
segment behind (rank 1 or rank 0, which created it, killed). With max_restarts
the group restarts and resumes from the last checkpoint, ending exactly where an uninterrupted run
ends. Measured times to exit are printed to stderr (quoted in docs/design/0002).

Run: ACCEL_BINARY=build/accel python -m unittest -v test_collective_faults (from tests/numerics).
"""
import os
import re
import sys
import tempfile
import unittest

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import trainer_test_support as ts  # noqa: E402
from test_trainer_end_to_end import _Base  # noqa: E402  (assertLaunch, assertSameMetrics, tmpdir)
from watched_launch import job_processes, watched_launch  # noqa: E402

TIMEOUT_S = 5  # collective_timeout_s of the faulted jobs: small, so a hang ends quickly
GRACE_S = 2    # shutdown_grace_s
# Acceptance margin on top of timeout + grace: a worker's teardown after its failed collective, the
# launcher's reaping, and scheduling on a loaded 2-core machine. Not a performance goal.
MARGIN_S = 5


def fault_job(out, tokens, world, steps, **kw):
    job = ts.job(out, data_path=tokens, world=world, steps=steps, eval_every=0, **kw)
    job["collective_timeout_s"] = TIMEOUT_S
    job["shutdown_grace_s"] = GRACE_S
    return job


def timed_launch(job_path, run_dir, env_extra):
    """`accel launch JOB` watched. Returns (CompletedProcess, seconds from the ACCEL_FAULT line to the
    launcher's exit, pids of the run's processes seen while it ran)."""
    proc, times, seen = watched_launch(job_path, run_dir, env_extra, {"fault": lambda line: "ACCEL_FAULT:" in line})
    return proc, (times["exit"] - times["fault"]) if "fault" in times else None, seen


class CollectiveFaultStops(_Base):
    """A rank frozen or killed inside a collective ends the job: exit 1, rank and op named, nothing left."""

    @classmethod
    def setUpClass(cls):
        cls._tmp = tempfile.TemporaryDirectory(prefix="accel_faults_")
        cls.tokens = ts.make_tokens(os.path.join(cls._tmp.name, "tok.bin"))

    @classmethod
    def tearDownClass(cls):
        cls._tmp.cleanup()

    def run_fault(self, world, fault):
        d = self.tmpdir()
        out = os.path.join(d, "out")
        job_path = ts.write_job(os.path.join(d, "job.yaml"), fault_job(out, self.tokens, world, steps=6))
        p, elapsed, seen = timed_launch(job_path, out, {"ACCEL_FAULT": fault})
        self.assertLaunch(p, 1, f"ACCEL_FAULT={fault}")
        self.assertIsNotNone(elapsed, f"the fault never fired\n{ts.describe(p)}")
        summary = p.stderr[p.stderr.rfind("error: rank "):]
        pids = {int(r): int(pid) for r, pid in re.findall(r"rank (\d+) \(pid (\d+)\)", summary)}
        self.assertEqual(sorted(pids), list(range(world)), f"every rank named in the summary\n{summary}")
        # The orphan check saw the workers while they ran, so its empty answer below means something.
        self.assertLessEqual(set(pids.values()), seen, "workers the process watch missed")
        self.assertEqual(job_processes(out), [], "processes of the run left behind")
        for pid in seen:
            self.assertFalse(os.path.exists(f"/proc/{pid}"), f"pid {pid} is still there")
        # The ranks shared memory (docs/design/0020), and no segment of theirs outlived them: rank 0
        # names each segment /accel-shm-<its pid>-<token> and removes the name once every rank has
        # opened it, so a rank killed later leaves nothing in /dev/shm.
        self.assertIn("collectives over gloo (shared memory)", p.stdout + p.stderr)
        left = [n for n in os.listdir("/dev/shm") if any(n.startswith(f"accel-shm-{pid}-") for pid in seen)]
        self.assertEqual(left, [], "shared-memory segments of the run left in /dev/shm")
        return p, summary, elapsed, pids

    def test_hang_in_collective_world3(self):
        p, summary, elapsed, pids = self.run_fault(3, "1:hang_in_collective:2")
        print(f"\n[hang] rank 1 of 3 SIGSTOPped in all_reduce: job exited {elapsed:.2f} s after the fault "
              f"(collective_timeout_s {TIMEOUT_S}, shutdown_grace_s {GRACE_S})\n{summary}", file=sys.stderr)
        self.assertIn("[rank 1] ACCEL_FAULT: stopping this worker (SIGSTOP) in all_reduce of step 2", p.stderr)
        # A survivor failed first, on the collective's timeout, naming the op ...
        self.assertRegex(summary, r"^error: rank ([02]) \(pid \d+\) exited with code 1: all_reduce on rank \1 of 3 "
                                  rf"\(gloo\): timed out after {TIMEOUT_S * 1000} ms")
        # ... and the launcher named the frozen rank and took it down without waiting out the grace.
        self.assertIn(f"\nrank 1 (pid {pids[1]}) was stopped (process state T: SIGSTOP or SIGTSTP) when the group "
                      "was stopped", summary)
        self.assertIn(f"rank 1 (pid {pids[1]}) (frozen, sent SIGTERM and SIGCONT) had to be stopped: it was killed "
                      "by signal 15 (SIGTERM)", summary)
        # Not before the timeout (the timeout is what ends a hang), and within timeout + grace + margin.
        # (1 s of slack: a survivor may enter the all_reduce, and start its clock, before rank 1 issues it)
        self.assertGreaterEqual(elapsed, TIMEOUT_S - 1)
        self.assertLessEqual(elapsed, TIMEOUT_S + GRACE_S + MARGIN_S)

    def test_die_in_collective_world2(self):
        p, summary, elapsed, pids = self.run_fault(2, "1:die_in_collective:2")
        print(f"\n[die] rank 1 of 2 SIGKILLed in all_reduce: job exited {elapsed:.2f} s after the fault "
              f"(shutdown_grace_s {GRACE_S})\n{summary}", file=sys.stderr)
        self.assertTrue(summary.startswith(f"error: rank 1 (pid {pids[1]}) was killed by signal 9 (SIGKILL)"), summary)
        # its last lines, in the summary, name the op it died in
        self.assertIn("\n  ACCEL_FAULT: killing this worker (SIGKILL) in all_reduce of step 2", summary)
        # stopped by the launcher, or (on a loaded machine) failed on the broken connection first
        self.assertRegex(summary, rf"\nrank 0 \(pid {pids[0]}\) (had to be stopped|also failed)")
        self.assertNotIn("was stopped (process state", summary)
        self.assertLessEqual(elapsed, GRACE_S + MARGIN_S)  # a death is seen at once, no timeout involved

    def test_creator_of_the_shared_memory_dies_in_collective_world2(self):
        # Rank 0 created the run's shared-memory segment: its death must not leave it behind either.
        p, summary, elapsed, pids = self.run_fault(2, "0:die_in_collective:2")
        self.assertTrue(summary.startswith(f"error: rank 0 (pid {pids[0]}) was killed by signal 9 (SIGKILL)"), summary)
        self.assertLessEqual(elapsed, GRACE_S + MARGIN_S)


class CollectiveFaultRestarts(_Base):
    """With max_restarts 1, a fault inside a collective costs a restart from the last checkpoint and
    nothing else: metrics and weights equal the uninterrupted run's."""

    STEPS = 12

    @classmethod
    def setUpClass(cls):
        cls._tmp = tempfile.TemporaryDirectory(prefix="accel_faults_restart_")
        d = cls._tmp.name
        cls.tokens = ts.make_tokens(os.path.join(d, "tok.bin"))
        cls.baseline = os.path.join(d, "baseline")
        p = ts.launch(ts.write_job(os.path.join(d, "baseline.yaml"),
                                   ts.job(cls.baseline, data_path=cls.tokens, world=2, steps=cls.STEPS,
                                          checkpoint_every=4, eval_every=0)))
        if p.returncode != 0:
            raise RuntimeError("uninterrupted run failed: " + ts.describe(p))

    @classmethod
    def tearDownClass(cls):
        cls._tmp.cleanup()

    def run_restarted(self, fault, resumed_step):
        d = self.tmpdir()
        out = os.path.join(d, "out")
        job = fault_job(out, self.tokens, 2, steps=self.STEPS, checkpoint_every=4, max_restarts=1)
        p, elapsed, _ = timed_launch(ts.write_job(os.path.join(d, "job.yaml"), job), out, {"ACCEL_FAULT": fault})
        self.assertLaunch(p, 0, f"ACCEL_FAULT={fault} with max_restarts 1")
        self.assertIn(f"resumed from {ts.ckpt_dir(out, resumed_step)} ({resumed_step} steps done)",
                      p.stdout + p.stderr, ts.describe(p))
        metrics = ts.read_metrics(out)
        self.assertEqual([r["step"] for r in metrics], list(range(self.STEPS)))
        self.assertSameMetrics(ts.read_metrics(self.baseline), metrics, "uninterrupted vs restarted")
        self.assertEqual(ts.read_bytes(os.path.join(self.baseline, "weights.safetensors")),
                         ts.read_bytes(os.path.join(out, "weights.safetensors")), "final weights differ")
        notice = [line for line in p.stderr.splitlines() if line.startswith("[launcher] ")]
        self.assertEqual(len(notice), 1, p.stderr)
        final = metrics[-1]
        print(f"\n[restart {fault}] fault to the end of the run (restart included) {elapsed:.2f} s; "
              f"resumed from step {resumed_step}; final loss {final['loss']:.6f} = uninterrupted run\n{notice[0]}",
              file=sys.stderr)
        return notice[0]

    def test_hang_in_collective_restarts_from_checkpoint(self):
        # frozen in step 6 (6 done): the newest checkpoint is step_00000004
        notice = self.run_restarted("1:hang_in_collective:6", 4)
        self.assertRegex(notice, r"^\[launcher\] rank 0 \(pid \d+\) exited with code 1: all_reduce on rank 0 of 2 "
                                 rf"\(gloo\): timed out after {TIMEOUT_S * 1000} ms")
        self.assertRegex(notice, r"; rank 1 \(pid \d+\) was stopped \(process state T: SIGSTOP or SIGTSTP\).*; "
                                 r"restarting all 2 workers \(restart attempt 1 of 1\)$")

    def test_die_in_collective_restarts_from_checkpoint(self):
        # rank 0 (the rendezvous store's host) dies in step 9 (9 done): the newest checkpoint is step_00000008
        notice = self.run_restarted("0:die_in_collective:9", 8)
        self.assertRegex(notice, r"^\[launcher\] rank 0 \(pid \d+\) was killed by signal 9 \(SIGKILL\); "
                                 r"restarting all 2 workers \(restart attempt 1 of 1\)$")


if __name__ == "__main__":
    unittest.main()
