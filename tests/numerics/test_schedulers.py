"""`accel launch` under real schedulers: Open MPI's mpirun and a one-node SLURM cluster that the test
starts and stops (munged, slurmctld and slurmd as root, private ports and directories).

Each layout the launcher detects trains the plain launch's losses bit for bit (the same world,
ranks and data, so the same sums in the same order):
- one task per process (mpirun -np 2, srun -n 2): two launchers share one output_dir, each running
  the rank the scheduler gave it;
- one task per machine (mpirun -np 1, srun -n 1): one launcher spawns both workers.
Every layout gets the job secret as SECURITY.md's SLURM recipe makes it (ACCEL_SECRET_FILE, mode 0600).
SlurmBatch: a job sent with sbatch and cancelled with scancel while it trains leaves no process
(launchers and workers are found by a marker variable in their environment).

Skipped (exit 77) only where the schedulers are not installed (scripts/setup.sh installs
openmpi-bin, slurmctld, slurmd, slurm-client and munge); the SLURM cases need root, as the
cluster's daemons do.
"""
import os
import shutil
import signal
import subprocess
import tempfile
import time
import unittest
import uuid

from reserved_ports import reserve_port
from trainer_test_support import ACCEL, clean_env, describe, read_metrics, write_job

STEPS = 6
TIMING = ("tokens_per_s", "step_time_s", "peak_mem_bytes")


def small_job(out, port, steps=STEPS):
    """A two-rank zero-3 job on synthetic data: both layouts of two tasks need a fixed port."""
    return {"backend": "deepspeed", "deepspeed": {"zero_stage": 3}, "num_processes": 2, "device": "cpu",
            "main_process_ip": "127.0.0.1", "main_process_port": port, "collective_timeout_s": 60,
            "rendezvous_timeout_s": 60,
            "model": {"name": "gpt", "n_layer": 2, "n_head": 2, "n_embd": 32, "vocab_size": 64, "block_size": 16},
            "data": {"kind": "synthetic", "val_fraction": 0.0},
            "training": {"max_steps": steps, "micro_batch_size": 2, "seq_len": 16, "output_dir": out,
                         "log_every": 1, "eval_every": 0, "resume": "never"}}


def losses(out):
    return [{k: v for k, v in r.items() if k not in TIMING} for r in read_metrics(out)]


def run_cmd(cmd, cwd, timeout=180, env_extra=None):
    return subprocess.run(cmd, cwd=cwd, env=clean_env({"OMP_NUM_THREADS": "1", **(env_extra or {})}),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=timeout)


def marked_processes(marker):
    """PIDs of every process whose environment holds SCHED_TEST_MARKER=<marker>."""
    needle = b"SCHED_TEST_MARKER=" + marker.encode() + b"\0"
    pids = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if needle in f.read() + b"\0":
                    pids.append(int(pid))
        except OSError:
            continue
    return pids


def command_line(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f"{pid}: " + f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return f"{pid}: (gone)"


def secret_file(tmp):
    """The job secret every task's launcher reads, made as SECURITY.md's SLURM recipe makes it."""
    path = os.path.join(tmp, "accel-secret")
    if not os.path.exists(path):
        subprocess.run(["bash", "-c", f"(umask 077; head -c 32 /dev/urandom > '{path}')"], check=True)
    return {"ACCEL_SECRET_FILE": path}


class SchedulerCase(unittest.TestCase):
    def plain_reference(self, tmp, port):
        out = os.path.join(tmp, "plain")
        path = write_job(os.path.join(tmp, "plain.yaml"), small_job(out, port))
        proc = run_cmd([ACCEL, "launch", path], tmp)
        self.assertEqual(proc.returncode, 0, describe(proc))
        ref = losses(out)
        self.assertEqual(len(ref), STEPS)
        return ref

    def check_layout(self, tmp, name, command, announce, ref, port):
        out = os.path.join(tmp, name)
        path = write_job(os.path.join(tmp, name + ".yaml"), small_job(out, port))
        started = time.monotonic()
        proc = run_cmd(command(path), tmp, env_extra=secret_file(tmp))
        seconds = time.monotonic() - started
        self.assertEqual(proc.returncode, 0, describe(proc))
        self.assertIn(announce, proc.stdout + proc.stderr)
        self.assertNotIn("no job secret", proc.stderr, "every task's launcher reads ACCEL_SECRET_FILE")
        self.assertEqual(losses(out), ref, "the layout trained other numbers than the plain launch")
        print(f"  {name}: {STEPS} steps equal to the plain launch's, {seconds:.1f} s")


class OpenMpi(SchedulerCase):
    def test_task_per_process_and_per_machine_train_the_plain_launch(self):
        mpirun = shutil.which("mpirun")
        if not mpirun:
            self.skipTest("Open MPI's mpirun is not installed (Debian: openmpi-bin)")
        root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
        # --bind-to none: the workers' threads are not confined to one core per task.
        base = [mpirun, *root, "--oversubscribe", "--bind-to", "none", "--mca", "btl", "self,tcp"]
        with tempfile.TemporaryDirectory() as tmp:
            port = reserve_port()
            ref = self.plain_reference(tmp, port)
            self.check_layout(tmp, "mpirun_np2", lambda job: [*base, "-np", "2", ACCEL, "launch", job],
                              "Open MPI: one task per process", ref, port)
            self.check_layout(tmp, "mpirun_np1", lambda job: [*base, "-np", "1", ACCEL, "launch", job],
                              "Open MPI: one task per machine", ref, port)


class SlurmCluster:
    """A one-node SLURM cluster in `tmp`: its own munge key and socket, ports, state and spool."""

    def __init__(self, tmp):
        self.dir = os.path.join(tmp, "slurm")
        os.makedirs(os.path.join(self.dir, "state"))
        os.makedirs(os.path.join(self.dir, "spool"))
        self.conf = os.path.join(self.dir, "slurm.conf")
        self.socket = os.path.join(self.dir, "munge.socket")
        self.procs = []
        self.env = {"SLURM_CONF": self.conf}

    def start(self):
        key = os.path.join(self.dir, "munge.key")
        with open(key, "wb") as f:
            f.write(os.urandom(1024))
        os.chmod(key, 0o400)
        subprocess.run(["munged", "--force", "--key-file", key, "--socket", self.socket,
                        "--pid-file", os.path.join(self.dir, "munged.pid"),
                        "--log-file", os.path.join(self.dir, "munged.log"),
                        "--seed-file", os.path.join(self.dir, "munged.seed")], check=True, timeout=30)
        host = subprocess.run(["hostname", "-s"], stdout=subprocess.PIPE, text=True, check=True).stdout.strip()
        cpus = os.cpu_count() or 2
        ctld_port, slurmd_port = reserve_port(), reserve_port()
        with open(self.conf, "w") as f:
            f.write(f"""ClusterName=accel-test
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={self.socket}
CredType=cred/munge
StateSaveLocation={self.dir}/state
SlurmdSpoolDir={self.dir}/spool
SlurmctldPidFile={self.dir}/slurmctld.pid
SlurmdPidFile={self.dir}/slurmd.pid
SlurmctldLogFile={self.dir}/slurmctld.log
SlurmdLogFile={self.dir}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
SchedulerType=sched/builtin
KillWait=5
NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN
PartitionName=test Nodes={host} Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
""")
        env = clean_env(self.env)
        for daemon in (["slurmctld", "-D", "-i", "-f", self.conf], ["slurmd", "-D", "-f", self.conf, "-N", host]):
            with open(os.path.join(self.dir, daemon[0] + ".out"), "w") as log:  # the daemon keeps its copy
                self.procs.append(subprocess.Popen(daemon, env=env, stdout=log, stderr=subprocess.STDOUT,
                                                   start_new_session=True))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            state = subprocess.run(["sinfo", "-h", "-o", "%T"], env=env, stdout=subprocess.PIPE,
                                   stderr=subprocess.DEVNULL, text=True).stdout.strip()
            if state.startswith("idle"):
                return
            time.sleep(0.3)
        raise RuntimeError("the SLURM node never became idle:\n" + self.logs())

    def logs(self):
        text = ""
        for name in ("slurmctld.out", "slurmd.out", "slurmctld.log", "slurmd.log"):
            path = os.path.join(self.dir, name)
            if os.path.exists(path):
                with open(path) as f:
                    text += f"--- {name} ---\n" + f.read()[-2000:]
        return text

    def stop(self):
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        pid_file = os.path.join(self.dir, "munged.pid")
        if os.path.exists(pid_file):
            with open(pid_file) as f:
                try:
                    pid = int(f.read().strip())
                    os.kill(pid, signal.SIGTERM)
                except (ValueError, ProcessLookupError):
                    return
            deadline = time.monotonic() + 10  # gone before its directory is removed
            while time.monotonic() < deadline and os.path.exists(f"/proc/{pid}"):
                time.sleep(0.05)


def slurm_available(test):
    missing = [t for t in ("munged", "slurmctld", "slurmd", "srun", "sbatch", "scancel", "sinfo") if not shutil.which(t)]
    if missing:
        test.skipTest("SLURM is not installed (Debian: slurmctld slurmd slurm-client munge): no " + ", ".join(missing))
    if os.geteuid() != 0:
        test.skipTest("the test's SLURM cluster runs its daemons as root")


class Slurm(SchedulerCase):
    def test_srun_task_per_process_and_per_machine_and_sbatch_scancel(self):
        slurm_available(self)
        with tempfile.TemporaryDirectory() as tmp:
            cluster = SlurmCluster(tmp)
            try:
                cluster.start()
                port = reserve_port()
                ref = self.plain_reference(tmp, port)
                srun = ["srun", "--quiet", "--overcommit", "--cpu-bind=none", "--export=ALL"]
                run_env = cluster.env

                def layout(name, tasks, announce):
                    out = os.path.join(tmp, name)
                    path = write_job(os.path.join(tmp, name + ".yaml"), small_job(out, port))
                    proc = run_cmd([*srun, "-n", str(tasks), ACCEL, "launch", path], tmp,
                                   env_extra={**run_env, **secret_file(tmp)})
                    self.assertEqual(proc.returncode, 0, describe(proc) + cluster.logs())
                    self.assertIn(announce, proc.stdout + proc.stderr)
                    self.assertNotIn("no job secret", proc.stderr, "every task's launcher reads ACCEL_SECRET_FILE")
                    self.assertEqual(losses(out), ref, "the layout trained other numbers than the plain launch")
                    print(f"  {name}: {STEPS} steps equal to the plain launch's")

                layout("srun_n2", 2, "SLURM: one task per process")
                layout("srun_n1", 1, "SLURM: one task per machine")
                self.check_sbatch_scancel(tmp, cluster, port)
            finally:
                cluster.stop()

    def check_sbatch_scancel(self, tmp, cluster, port):
        out = os.path.join(tmp, "batch")
        path = write_job(os.path.join(tmp, "batch.yaml"), small_job(out, port, steps=100000))
        marker = uuid.uuid4().hex
        script = os.path.join(tmp, "batch.sh")
        with open(script, "w") as f:
            # The job secret as SECURITY.md's sbatch recipe makes it (the tasks are refused without it);
            # the temporary directory goes with the test, so no `rm` after srun.
            secret = os.path.join(tmp, "accel-secret-$SLURM_JOB_ID")
            f.write(f"#!/bin/bash\nexport SCHED_TEST_MARKER={marker}\n"
                    f"(umask 077; head -c 32 /dev/urandom > {secret})\nexport ACCEL_SECRET_FILE={secret}\n"
                    f"exec srun --overcommit --cpu-bind=none -n 2 {ACCEL} launch {path}\n")
        sub = run_cmd(["sbatch", "--parsable", "-n", "2", "--overcommit", "-o", os.path.join(tmp, "batch.out"), script],
                      tmp, env_extra=cluster.env)
        self.assertEqual(sub.returncode, 0, describe(sub) + cluster.logs())
        job_id = sub.stdout.strip().split(";")[0]
        # Training has begun once both ranks' workers exist and step 1 is in metrics.jsonl.
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not os.path.exists(os.path.join(out, "metrics.jsonl")):
            time.sleep(0.2)
        self.assertTrue(os.path.exists(os.path.join(out, "metrics.jsonl")), "the batch job never trained\n" +
                        cluster.logs())
        running = marked_processes(marker)
        self.assertGreaterEqual(len(running), 4, "expected the batch script, two launchers and two workers")
        cancel = run_cmd(["scancel", job_id], tmp, env_extra=cluster.env)
        self.assertEqual(cancel.returncode, 0, describe(cancel))
        cancelled = time.monotonic()
        while time.monotonic() < cancelled + 30 and marked_processes(marker):
            time.sleep(0.2)
        left = marked_processes(marker)
        self.assertEqual(left, [], "processes left after scancel: " + ", ".join(command_line(p) for p in left))
        print(f"  sbatch job {job_id}: {len(running)} processes while training, none "
              f"{time.monotonic() - cancelled:.1f} s after scancel")


if __name__ == "__main__":
    unittest.main()
