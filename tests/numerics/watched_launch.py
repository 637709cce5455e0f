"""`accel launch` watched while it runs: its output read live, the moments chosen lines first
appeared and the launcher exited, and the run's processes seen meanwhile, so a fault test can say
how long the job took to react and whether anything outlived it."""
from __future__ import annotations

import os
import subprocess
import threading
import time

import trainer_test_support as ts


def job_processes(run_dir, every_machine=False):
    """Pids of live processes started for this run: their environment names its resolved job
    (every_machine: any machine's, job.resolved.yaml or job.resolved.machine<k>.yaml)."""
    needle = ("ACCEL_JOB=" + os.path.join(run_dir, "job.resolved" + ("" if every_machine else ".yaml"))).encode()
    pids = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:  # gone meanwhile, or not ours to read
            continue
        if any(e == needle or (every_machine and e.startswith(needle)) for e in env):
            pids.append(int(name))
    return pids


def watched_launch(job_path, run_dir, env_extra, marks):
    """Runs `accel launch JOB`. `marks` maps a name to a predicate on stderr lines. Returns
    (CompletedProcess, {name: monotonic time of the first line it matched, "exit": the launcher's
    exit}, pids of the run's processes seen while it ran)."""
    p = subprocess.Popen([ts.ACCEL, "launch", job_path], cwd=os.path.dirname(job_path),
                         env=ts.clean_env(env_extra), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    times, seen, out, err = {}, set(), [], []

    def read_err():
        for line in p.stderr:
            now = time.monotonic()
            for name, matches in marks.items():
                if name not in times and matches(line):
                    times[name] = now
            err.append(line)

    def watch_processes():  # the workers live for seconds (start-up, steps): a 100 ms poll sees them
        while p.poll() is None:
            seen.update(job_processes(run_dir))
            time.sleep(0.1)

    readers = [threading.Thread(target=read_err), threading.Thread(target=lambda: out.extend(p.stdout)),
               threading.Thread(target=watch_processes)]
    for t in readers:
        t.start()
    try:
        p.wait(timeout=ts.PROC_TIMEOUT_S)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        times["exit"] = time.monotonic()
        for t in readers:
            t.join()
        p.stdout.close()
        p.stderr.close()
    return subprocess.CompletedProcess(p.args, p.returncode, "".join(out), "".join(err)), times, seen
