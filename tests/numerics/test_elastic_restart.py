"""Elastic restarts (docs/design/0027) through the real launcher, two launchers on loopback.

One job, `num_machines: 1:2`, 2 CPU ranks per machine, a checkpoint every 4 steps. Rank 2 (machine
1) freezes in step 6 (ACCEL_FAULT hang_in_collective); the test then kills machine 1 for good: its
launcher and its workers, SIGKILL. Machine 0 must go on without a person: its launcher stops its
workers, holds a restart round that closes with machine 0 alone after the join window, prints one
line naming the lost machine, the new world and the checkpoint, and resumes from step 4 at world 2
with gradient_accumulation_steps 2 (elastic_batch keep_global: the 8-row global batch kept). It
must exit 0, leave no process behind, and train exactly (bit for bit) as a job started at world 2
from the same checkpoint: both runs load the same checkpoint into the same world with the same
batch split, so nothing may differ.

Run: ACCEL_BINARY=build/accel python -m unittest -v test_elastic_restart (from tests/numerics).
"""
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import trainer_test_support as ts  # noqa: E402
from reserved_ports import reserve_port  # noqa: E402
from test_trainer_end_to_end import _Base  # noqa: E402  (assertLaunch, assertSameMetrics, tmpdir)
from watched_launch import job_processes  # noqa: E402

STEPS = 10
CHECKPOINT_EVERY = 4
JOIN_WINDOW_S = 2  # short: the restart round waits this long for machine 1 before it goes on without it
FAULT = "2:hang_in_collective:6"  # rank 2, machine 1's first, freezes as step 6 starts: latest is step 4


def run_processes(run_dir):
    """Pids of live processes of this run (any machine's)."""
    return job_processes(run_dir, every_machine=True)


def running(pid):
    """True while `pid` exists and is not a zombie: the workers the test kills with their launcher
    are reparented to init, which reaps them on its own time; a zombie holds nothing but its pid."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


class Launcher:
    """`accel launch JOB --set machine_rank=M`, its stderr read live."""

    def __init__(self, job_path, machine, env_extra=None):
        self.proc = subprocess.Popen([ts.ACCEL, "launch", job_path, "--set", f"machine_rank={machine}"],
                                     cwd=os.path.dirname(job_path), env=ts.clean_env(ts.secret_env(env_extra)),
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.err, self.out = [], []
        self.times = []  # monotonic time each stderr line was read, for the figures printed below
        self.readers = [threading.Thread(target=self._read_err),
                        threading.Thread(target=lambda: self.out.extend(self.proc.stdout))]
        for t in self.readers:
            t.start()

    def _read_err(self):
        for line in self.proc.stderr:
            self.times.append(time.monotonic())
            self.err.append(line)

    def first(self, text):
        """When the first stderr line containing `text` was read, or None."""
        return next((t for t, line in zip(list(self.times), list(self.err)) if text in line), None)

    def saw(self, text):
        return any(text in line for line in list(self.err))

    def finish(self, timeout):
        try:
            self.proc.wait(timeout=timeout)
        finally:
            self.exited_at = time.monotonic()
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            for t in self.readers:
                t.join()
            self.proc.stdout.close()
            self.proc.stderr.close()
        return subprocess.CompletedProcess(self.proc.args, self.proc.returncode, "".join(self.out), "".join(self.err))


class ElasticRestart(_Base):
    def test_losing_machine_0_ends_the_job(self):
        """Machine 0 hosts the rendezvous and rank 0's store: without it the others stop their workers
        and exit 1 saying so, instead of waiting out a timeout."""
        d = self.tmpdir()
        tokens = ts.make_tokens(os.path.join(d, "tok.bin"))
        out = os.path.join(d, "elastic")
        job = ts.job(out, data_path=tokens, world=4, micro=2, accum=1, steps=STEPS, eval_every=0, max_restarts=1)
        job.update({"num_machines": "1:2", "main_process_ip": "127.0.0.1", "main_process_port": reserve_port(),
                    "elastic_join_window_s": JOIN_WINDOW_S, "shutdown_grace_s": 2})
        job_path = ts.write_job(os.path.join(d, "elastic.yaml"), job)
        machine1 = Launcher(job_path, 1, {"ACCEL_FAULT": "2:hang_in_collective:2"})
        machine0 = Launcher(job_path, 0)
        try:
            deadline = time.monotonic() + ts.PROC_TIMEOUT_S
            while not machine1.saw("ACCEL_FAULT:") and machine1.proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            self.assertTrue(machine1.saw("ACCEL_FAULT:"), "the fault never fired:\n" + "".join(machine1.err)[-3000:])
            seen = set(run_processes(out))
            workers0 = [pid for pid in seen if self._machine_of(pid) == 0]
            self.assertEqual(len(workers0), 2, f"machine 0's 2 workers, found {workers0}")
            for pid in [machine0.proc.pid] + workers0:
                os.kill(pid, signal.SIGKILL)
            p = machine1.finish(ts.PROC_TIMEOUT_S)
        finally:
            for launcher in (machine0, machine1):
                if launcher.proc.poll() is None:
                    launcher.proc.kill()
                launcher.finish(60)
        self.assertLaunch(p, 1, "machine 1 after losing machine 0")
        self.assertRegex(p.stderr, r"error: machine 1: lost machine 0's rendezvous at 127\.0\.0\.1:\d+: machine 0 hosts "
                                   r"the rendezvous and rank 0's store, so the job cannot go on without it; this "
                                   r"machine's workers were stopped\. Rerun `accel launch` on every machine to continue "
                                   r"from the last checkpoint")
        self.assertEqual(run_processes(out), [], "processes of the run left behind")
        for pid in seen:
            self.assertFalse(running(pid), f"pid {pid} is still running")

    def test_lost_machine_goes_on_at_the_smaller_world(self):
        d = self.tmpdir()
        tokens = ts.make_tokens(os.path.join(d, "tok.bin"))
        out = os.path.join(d, "elastic")
        job = ts.job(out, data_path=tokens, world=4, micro=2, accum=1, steps=STEPS, eval_every=0,
                     checkpoint_every=CHECKPOINT_EVERY, max_restarts=1)
        job.update({"num_machines": "1:2", "main_process_ip": "127.0.0.1", "main_process_port": reserve_port(),
                    "elastic_join_window_s": JOIN_WINDOW_S, "shutdown_grace_s": 2})
        job_path = ts.write_job(os.path.join(d, "elastic.yaml"), job)

        # Machine 1 first: it retries until machine 0 hosts the rendezvous, so both are in round 0
        # (which closes as soon as both joined, or JOIN_WINDOW_S after machine 0 alone did).
        machine1 = Launcher(job_path, 1, {"ACCEL_FAULT": FAULT})
        machine0 = Launcher(job_path, 0)
        seen = set()  # every worker of the run seen while it ran (a 100 ms poll: workers live for seconds)
        watching = threading.Event()
        watching.set()

        def watch():
            while watching.is_set():
                seen.update(run_processes(out))
                time.sleep(0.1)

        watcher = threading.Thread(target=watch)
        watcher.start()
        try:
            deadline = time.monotonic() + ts.PROC_TIMEOUT_S
            while not machine1.saw("ACCEL_FAULT:") and machine1.proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            self.assertTrue(machine1.saw("ACCEL_FAULT:"), "the fault never fired:\n" + "".join(machine1.err)[-3000:])
            # Machine 1 is lost for good: its launcher and every worker it started, at once.
            workers1 = [pid for pid in run_processes(out) if self._machine_of(pid) == 1]
            self.assertEqual(len(workers1), 2, f"machine 1's 2 workers, found {workers1}")
            for pid in [machine1.proc.pid] + workers1:
                os.kill(pid, signal.SIGKILL)
            killed_at = time.monotonic()
            lost = machine1.finish(60)
            self.assertEqual(lost.returncode, -signal.SIGKILL, "machine 1's launcher was killed")
            p = machine0.finish(ts.PROC_TIMEOUT_S)
        finally:
            watching.clear()
            watcher.join()
            for launcher in (machine0, machine1):
                if launcher.proc.poll() is None:  # a failed assertion above: no launcher outlives the test
                    launcher.proc.kill()
                    launcher.finish(60)
        self.assertLaunch(p, 0, "machine 0 after losing machine 1")
        print(f"\n--- machine 0's launcher (stderr, launcher lines) ---", file=sys.stderr)
        for line in p.stderr.splitlines():
            if line.startswith("[launcher]") or line.startswith("accel launch"):
                print(line, file=sys.stderr)
        # Figures for docs/design/0027 (printed, not asserted: the machine may be loaded).
        restarted_at = machine0.first("[launcher] elastic restart")
        print(f"restart line {restarted_at - killed_at:.2f} s after the SIGKILL (join window {JOIN_WINDOW_S} s); "
              f"machine 0 exited {machine0.exited_at - killed_at:.2f} s after it", file=sys.stderr)
        rounds = [line for line in p.stderr.splitlines() if line.startswith("[launcher] elastic")]
        self.assertEqual(len(rounds), 2, f"one line per round\n{ts.describe(p)}")
        self.assertIn("elastic round 0: machines 0 and 1 of 2 joined, world 4 (ranks 0-1 here)", rounds[0])
        restart = rounds[1]
        # The cause is the first of two events machine 0 sees: machine 1's launcher connection closing,
        # or (on a loaded machine, when machine 1's launcher dies after its workers) machine 0's own
        # ranks failing in the collective machine 1's workers left. Either way the line says that
        # machine 1 left and how the job goes on.
        self.assertRegex(restart, r"^\[launcher\] elastic restart 1 of 1: (machine 1 \(.*\) was lost: its launcher's "
                                  r"connection to machine 0 closed|machine 0 \(.*\): rank [01] .*); machine 1 left the "
                                  r"job; continuing on machine 0 "
                                  r"\(1 of 2\), world 4 -> 2 \(ranks 0-1 here\), gradient_accumulation_steps 1 -> 2 "
                                  r"\(global batch of 8 rows kept\), resuming from checkpoint step 4 \(.*step_00000004\)$")

        # Nothing of the run outlived it: every worker seen while it ran (machine 1's 2, machine 0's 2 of
        # each round) is gone.
        self.assertGreaterEqual(len(seen), 6, f"the process watch missed workers: {sorted(seen)}")
        self.assertEqual(run_processes(out), [], "processes of the run left behind")
        for pid in seen:
            self.assertFalse(running(pid), f"pid {pid} is still running")

        elastic = ts.read_metrics(out)
        self.assertEqual([r["step"] for r in elastic], list(range(STEPS)), "every step recorded once")
        self.assertEqual(ts.read_latest(out), os.path.basename(ts.ckpt_dir(out, STEPS)))

        # The same checkpoint, resumed by a job started at world 2 with the accumulation the rule gave.
        ref_out = os.path.join(d, "world2")
        ref = ts.job(ref_out, data_path=tokens, world=2, micro=2, accum=2, steps=STEPS, eval_every=0,
                     checkpoint_every=CHECKPOINT_EVERY, resume=ts.ckpt_dir(out, CHECKPOINT_EVERY))
        ref_path = ts.write_job(os.path.join(d, "world2.yaml"), ref)
        r = ts.launch(ref_path)
        self.assertLaunch(r, 0, "the world-2 job from step 4")
        resumed = ts.read_metrics(ref_out)
        self.assertEqual([x["step"] for x in resumed], list(range(CHECKPOINT_EVERY, STEPS)))
        self.assertSameMetrics(elastic[CHECKPOINT_EVERY:], resumed, "elastic run after the restart vs world 2")
        for a, b in zip(elastic[CHECKPOINT_EVERY:], resumed):
            print(f"step {a['step']}: elastic loss {a['loss']!r}, world-2 job loss {b['loss']!r}", file=sys.stderr)

    @staticmethod
    def _machine_of(pid):
        """1 for machine 1's workers (their resolved job), else 0; -1 when the process is gone."""
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                return 1 if b"job.resolved.machine1.yaml" in f.read() else 0
        except OSError:
            return -1


if __name__ == "__main__":
    unittest.main()
