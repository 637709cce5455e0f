"""A checkpoint that cannot be written: a full disk (ENOSPC, by bytes and by inodes) and a read-only
or unwritable output_dir, on real file systems: a size-limited tmpfs mounted over the checkpoints
directory in a private mount namespace (`unshare -m`; skipped where that is not permitted).

    ACCEL_BINARY=build/accel PYTHONDONTWRITEBYTECODE=1 \
        scripts/python -m unittest discover -s tests/numerics -p test_checkpoint_disk_faults.py -v

- DiskFull: the second checkpoint does not fit. The run fails (exit 1) naming the file and "No space
  left on device", the partial directory is removed, `latest` still names the first checkpoint,
  the message says what to do; after space is freed the same command resumes from it and ends
  with the uninterrupted run's metrics and weights. The same with a file system out of inodes.
- Unwritable: a read-only checkpoints directory or output_dir is exit 2 at launch, naming
  training.output_dir, before any worker starts.
"""
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import trainer_test_support as ts  # noqa: E402

STEPS, EVERY = 12, 4
ZERO2 = ("backend=deepspeed", "deepspeed.zero_stage=2")  # both ranks write a shard file


def mount_namespace_available():
    if not shutil.which("unshare"):
        return False
    with tempfile.TemporaryDirectory() as d:
        p = subprocess.run(["unshare", "-m", "sh", "-c", f"mount -t tmpfs -o size=1m tmpfs {d}"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return p.returncode == 0


@unittest.skipUnless(mount_namespace_available(), "needs `unshare -m` and tmpfs mounts (root or user namespaces)")
class _Base(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls._tmp = tempfile.TemporaryDirectory(prefix="accel_diskfault_data_")
        cls.tokens = ts.make_tokens(os.path.join(cls._tmp.name, "tok.bin"))

    @classmethod
    def tearDownClass(cls):
        cls._tmp.cleanup()

    def setUp(self):
        d = tempfile.TemporaryDirectory(prefix="accel_diskfault_")
        self.addCleanup(d.cleanup)
        self.dir = d.name

    def job_file(self, out, name="job.yaml"):
        job = ts.job(out, data_path=self.tokens, world=2, micro=4, steps=STEPS, checkpoint_every=EVERY, eval_every=0)
        return ts.write_job(os.path.join(self.dir, name), job)

    def in_namespace(self, script):
        """Runs `script` (sh) in a private mount namespace: its mounts vanish with it."""
        env = ts.clean_env()
        env["ACCEL"] = ts.ACCEL
        p = subprocess.run(["unshare", "-m", "sh", "-euc", script], env=env, cwd=self.dir, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, timeout=ts.PROC_TIMEOUT_S)
        self.assertEqual(p.returncode, 0, f"namespace script failed\n{ts.describe(p)}")
        return p

    def read(self, name):
        with open(os.path.join(self.dir, name)) as f:
            return f.read()


class DiskFull(_Base):
    def _second_checkpoint_fails(self, mount_options, label):
        # The uninterrupted run, and the size of one checkpoint.
        ref = os.path.join(self.dir, "ref")
        p = ts.launch(self.job_file(ref, "ref.yaml"), sets=ZERO2)
        self.assertEqual(p.returncode, 0, ts.describe(p))
        ckpt = ts.ckpt_dir(ref, EVERY)
        one = sum(os.path.getsize(os.path.join(ckpt, n)) for n in os.listdir(ckpt))

        out = os.path.join(self.dir, "out")
        job = self.job_file(out)
        opts = mount_options(one)
        sets = " ".join(f"--set {s}" for s in ZERO2)
        self.in_namespace(f"""
            mkdir -p {out}/checkpoints
            mount -t tmpfs -o {opts} tmpfs {out}/checkpoints
            start=$(date +%s.%N)
            rc=0; "$ACCEL" launch {job} {sets} > run1.out 2> run1.err || rc=$?
            echo "$rc $start $(date +%s.%N)" > run1.rc
            cat {out}/checkpoints/latest > latest_after_failure
            ls -a {out}/checkpoints > listing_after_failure
            mount -o remount,size=256m,nr_inodes=100000 {out}/checkpoints   # the user frees space
            rc=0; "$ACCEL" launch {job} {sets} > run2.out 2> run2.err || rc=$?
            echo $rc > run2.rc
            cat {out}/checkpoints/latest > latest_at_end
        """)
        rc, t0, t1 = self.read("run1.rc").split()
        err = self.read("run1.err")
        print(f"\n[{label}] one checkpoint {one} bytes, tmpfs {opts}: the run failed (exit {rc}) "
              f"{float(t1) - float(t0):.1f} s after launch")
        self.assertEqual(rc, "1", err)
        for text in ("checkpoint step 8 could not be written", "No space left on device",
                     "the partial checkpoint was removed", "step_00000004 (4 steps), is intact and still `latest`",
                     "free disk space", "training.resume: auto continues"):
            self.assertIn(text, err)
        self.assertEqual(self.read("latest_after_failure"), "step_00000004\n")
        self.assertNotIn(".tmp.step_00000008", self.read("listing_after_failure"))
        self.assertEqual(self.read("run2.rc").strip(), "0", self.read("run2.err"))
        self.assertIn("resuming from " + os.path.join(out, "checkpoints", "step_00000004"), self.read("run2.err"))
        self.assertEqual(self.read("latest_at_end"), f"step_{STEPS:08d}\n")
        self.assertEqual(ts.without_timing(ts.read_metrics(ref)), ts.without_timing(ts.read_metrics(out)),
                         f"{label}: the resumed run's metrics differ from the uninterrupted run's")
        self.assertEqual(ts.read_bytes(os.path.join(ref, "weights.safetensors")),
                         ts.read_bytes(os.path.join(out, "weights.safetensors")))

    def test_out_of_space(self):
        # Room for one checkpoint and a half: the second one's files run out of bytes.
        self._second_checkpoint_fails(lambda one: f"size={one * 3 // 2 // 4096 * 4096}", "ENOSPC: bytes")

    def test_out_of_inodes(self):
        # tmpfs counts one inode per file or directory (and the root): room for the first checkpoint
        # (directory + 5 files + manifest), `latest`, and a few more, not the second checkpoint.
        self._second_checkpoint_fails(lambda one: "size=256m,nr_inodes=12", "ENOSPC: inodes")


class Unwritable(_Base):
    def test_read_only_checkpoints_or_output_dir_is_exit_2_at_launch(self):
        out = os.path.join(self.dir, "out")
        job = self.job_file(out)
        self.in_namespace(f"""
            mkdir -p {out}/checkpoints ro_out
            mount -t tmpfs -o ro tmpfs {out}/checkpoints
            rc=0; "$ACCEL" launch {job} > ckpt_ro.out 2> ckpt_ro.err || rc=$?; echo $rc > ckpt_ro.rc
            mount -t tmpfs -o ro tmpfs ro_out
            rc=0; "$ACCEL" launch {job} --set training.output_dir={self.dir}/ro_out/run > out_ro.out 2> out_ro.err \\
                || rc=$?; echo $rc > out_ro.rc
        """)
        for name, path in (("ckpt_ro", os.path.join(out, "checkpoints")), ("out_ro", f"{self.dir}/ro_out/run")):
            err = self.read(name + ".err")
            self.assertEqual(self.read(name + ".rc").strip(), "2", err)
            self.assertIn("training.output_dir", err)
            self.assertIn(path, err)
            # The validator finds an output_dir that cannot be created; the launcher a read-only one.
            self.assertTrue("Read-only file system" in err or "is not a writable directory" in err, err)
            print(f"\n[{name}] {err.strip()}")
            self.assertNotIn("[rank", err, "no worker may start")


if __name__ == "__main__":
    unittest.main()
