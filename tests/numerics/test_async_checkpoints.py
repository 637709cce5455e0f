"""Asynchronous checkpoints (training.async_checkpoint, docs/design/0028) through the real launcher:
the built-in trainer under deepspeed zero_stage 2 at world 2 (both ranks write a shard file),
6 steps, a checkpoint every 2.

    ACCEL_BINARY=build/accel PYTHONDONTWRITEBYTECODE=1 \\
        scripts/python -m unittest discover -s tests/numerics -p test_async_checkpoints.py -v

- AsyncCheckpoints.test_a: an asynchronous run writes the same checkpoints as a synchronous one,
  file for file and byte for byte (the generators and the job record aside, see SAME_BYTES), the
  same metrics and weights; a user's program (tests/api/resume_program.cpp: registered objects, a
  buffer, torch's generator) saving every 2 steps and ending right after its last save_state()
  leaves the same files too, every one (its exit waits for the background write).
- test_b: rank 1 is killed inside the background write of step_4 while its training thread runs
  step 5 (0-based, as ACCEL_FAULT counts: the save had returned): the run fails, `latest` still names step_2, step_4 was never committed; the same command
  again resumes from step_2 and ends with the uninterrupted run's metrics and weights.
- test_c: the checkpoints directory is a tmpfs with room for one and a half checkpoints (a private
  mount namespace, skipped where `unshare -m` is not allowed): the background write of step_4 runs
  out of space; the run fails (exit 1) with the checkpoint, the file and the OS error, `latest`
  stays on step_2 and the partial checkpoint is removed.
"""
import os
import subprocess
import tempfile
import unittest

import trainer_test_support as ts
from test_checkpoint_disk_faults import mount_namespace_available

STEPS, EVERY = 6, 2
ZERO2 = ["backend=deepspeed", "deepspeed.zero_stage=2"]
ASYNC = ZERO2 + ["training.async_checkpoint=true"]
RESUME_PROGRAM = os.environ.get("ACCEL_RESUME_PROGRAM") or os.path.join(ts.ROOT, "build", "tests", "api",
                                                                         "accel_test_resume_program")


def same_bytes(name):
    """The files an asynchronous and a synchronous run of one job must write alike. Not: the job
    record (it names its own output_dir), the manifest (it hashes the job record), and the trainer's
    rng_rank_* files: the built-in trainer draws nothing from torch's global CPU generator and never
    seeds it, so its saved state differs between two synchronous runs too (the user program below
    seeds and draws from it, and there they must be equal)."""
    return name not in ("job.resolved.yaml", "manifest.json") and not name.startswith("rng_rank_")


class AsyncCheckpoints(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls._tmp = tempfile.TemporaryDirectory(prefix="accel_async_ckpt_")
        cls.dir = cls._tmp.name
        cls.tokens = ts.make_tokens(os.path.join(cls.dir, "tok.bin"))
        cls.ref = os.path.join(cls.dir, "sync")
        p = ts.launch(cls.job_file(cls.ref), sets=ZERO2)
        if p.returncode != 0:
            raise RuntimeError("the synchronous reference run failed: " + ts.describe(p))

    @classmethod
    def tearDownClass(cls):
        cls._tmp.cleanup()

    @classmethod
    def job_file(cls, out, **kw):
        job = ts.job(out, data_path=cls.tokens, world=2, micro=4, steps=STEPS, checkpoint_every=EVERY, eval_every=0,
                     **kw)
        return ts.write_job(out + ".yaml", job)

    def assertSameRun(self, out, label):
        self.assertEqual(ts.without_timing(ts.read_metrics(self.ref)), ts.without_timing(ts.read_metrics(out)),
                         f"{label}: metrics differ from the synchronous run's")
        self.assertEqual(ts.read_bytes(os.path.join(self.ref, "weights.safetensors")),
                         ts.read_bytes(os.path.join(out, "weights.safetensors")), f"{label}: weights differ")

    def assertSameCheckpoint(self, a, b, keep=same_bytes):
        names = sorted(os.listdir(a))
        self.assertEqual(names, sorted(os.listdir(b)), f"{a} and {b} hold other files")
        compared = [n for n in names if keep(n)]
        self.assertTrue(any(n.startswith("zero_rank_") for n in compared), compared)
        for n in compared:
            self.assertEqual(ts.read_bytes(os.path.join(a, n)), ts.read_bytes(os.path.join(b, n)), f"{b}/{n} differs")
        return compared

    def test_a_same_checkpoints_as_synchronous_saves(self):
        out = os.path.join(self.dir, "async")
        p = ts.launch(self.job_file(out), sets=ASYNC)
        self.assertEqual(p.returncode, 0, ts.describe(p))
        log = p.stdout + p.stderr
        for step in range(EVERY, STEPS + 1, EVERY):
            self.assertIn(f"saving {ts.ckpt_dir(out, step)} ({step} steps) in the background", log)
            self.assertIn(f"committed {ts.ckpt_dir(out, step)} ({step} steps)", log)
            self.assertSameCheckpoint(ts.ckpt_dir(self.ref, step), ts.ckpt_dir(out, step))
        self.assertEqual(ts.read_latest(out), f"step_{STEPS:08d}")
        self.assertEqual(sorted(os.listdir(os.path.join(out, "checkpoints"))),
                         ["latest"] + [f"step_{s:08d}" for s in range(EVERY, STEPS + 1, EVERY)])
        self.assertSameRun(out, "asynchronous checkpoints")

        # A user's program: registered objects, a buffer, its own seeded generator; it returns right
        # after its last save_state(), so its exit waits for that background write.
        self.assertTrue(os.access(RESUME_PROGRAM, os.X_OK), f"{RESUME_PROGRAM} is not built")
        runs = {}
        for mode in ("false", "true"):
            prog = os.path.join(self.dir, "program_async_" + mode)
            job = {"program": [RESUME_PROGRAM, "--save-every", "2", "--stop-after", "6"], "num_processes": 2,
                   "device": "cpu", "main_process_port": 0, "collective_timeout_s": 60, "rendezvous_timeout_s": 60,
                   "backend": "deepspeed", "deepspeed": {"zero_stage": 2},
                   "training": {"micro_batch_size": 4, "max_steps": 8, "seed": 3, "output_dir": prog,
                                "resume": "never", "async_checkpoint": mode == "true"}}
            p = ts.run([ts.ACCEL, "launch", ts.write_job(prog + ".yaml", job)], cwd=self.dir)
            self.assertEqual(p.returncode, 0, ts.describe(p))
            runs[mode] = prog
        for step in (2, 4, 6):
            compared = self.assertSameCheckpoint(
                ts.ckpt_dir(runs["false"], step), ts.ckpt_dir(runs["true"], step),
                keep=lambda n: n not in ("job.resolved.yaml", "manifest.json"))
            for name in ("objects.safetensors", "module_extras.safetensors", "rng_rank_00001.safetensors"):
                self.assertIn(name, compared)
        self.assertEqual(ts.read_latest(runs["true"]), "step_00000006")

    def test_b_killed_during_the_background_write(self):
        out = os.path.join(self.dir, "killed")
        job = self.job_file(out)
        p = ts.launch(job, sets=ASYNC, env_extra={"ACCEL_FAULT": "1:checkpoint_background_write:3"})
        self.assertEqual(p.returncode, 1, ts.describe(p))
        self.assertIn("ACCEL_FAULT: killing this worker inside the background write of the checkpoint of step 3, "
                      "while its training thread runs step 5", p.stdout + p.stderr, ts.describe(p))
        # The save of step_4 had returned (training reached step 6) and was never committed.
        self.assertEqual(ts.read_latest(out), "step_00000002")
        self.assertFalse(os.path.exists(ts.ckpt_dir(out, 4)))
        self.assertTrue(os.path.isdir(os.path.join(out, "checkpoints", ".tmp.step_00000004")))

        p = ts.launch(job, sets=ASYNC)  # the same command again: training.resume auto
        self.assertEqual(p.returncode, 0, ts.describe(p))
        self.assertIn(f"resumed from {ts.ckpt_dir(out, 2)} (2 steps done)", p.stdout + p.stderr, ts.describe(p))
        self.assertFalse(os.path.exists(os.path.join(out, "checkpoints", ".tmp.step_00000004")))
        self.assertEqual(ts.read_latest(out), f"step_{STEPS:08d}")
        self.assertSameRun(out, "killed in a background write, then resumed")

    @unittest.skipUnless(mount_namespace_available(), "needs `unshare -m` and tmpfs mounts")
    def test_c_background_write_out_of_space(self):
        ckpt = ts.ckpt_dir(self.ref, EVERY)
        one = sum(os.path.getsize(os.path.join(ckpt, n)) for n in os.listdir(ckpt))
        size = one * 3 // 2 // 4096 * 4096
        out = os.path.join(self.dir, "full")
        job = self.job_file(out)
        env = ts.clean_env()
        env["ACCEL"] = ts.ACCEL
        sets = " ".join(f"--set {s}" for s in ASYNC)
        script = f"""
            mkdir -p {out}/checkpoints
            mount -t tmpfs -o size={size} tmpfs {out}/checkpoints
            rc=0; "$ACCEL" launch {job} {sets} > run.out 2> run.err || rc=$?
            echo $rc > run.rc
            cat {out}/checkpoints/latest > latest_after
            ls -a {out}/checkpoints > listing_after
        """
        p = subprocess.run(["unshare", "-m", "sh", "-euc", script], env=env, cwd=self.dir, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, timeout=ts.PROC_TIMEOUT_S)
        self.assertEqual(p.returncode, 0, ts.describe(p))

        def read(name):
            with open(os.path.join(self.dir, name)) as f:
                return f.read()
        err = read("run.err")
        print(f"\n[async, one checkpoint {one} bytes, tmpfs size={size}] accel said:\n{err.strip()[-1500:]}")
        self.assertEqual(read("run.rc").strip(), "1", err)
        for text in ("checkpoint step 4 could not be written", "No space left on device", os.path.join(out, "checkpoints"),
                     "the partial checkpoint was removed", "step_00000002 (2 steps), is intact and still `latest`",
                     "free disk space", "training.resume: auto continues"):
            self.assertIn(text, err)
        self.assertEqual(read("latest_after"), "step_00000002\n")
        self.assertNotIn(".tmp.step_00000004", read("listing_after"))


if __name__ == "__main__":
    unittest.main()
