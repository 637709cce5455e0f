"""Checkpoints on node-local storage (docs/design/0013): two launchers on loopback play two
machines, each with its own output_dir, as on a cluster without a shared file system.

    ACCEL_BINARY=build/accel PYTHONDONTWRITEBYTECODE=1 \
        scripts/python -m unittest discover -s tests/numerics -p test_node_local_checkpoints.py -v

- HybridShardTwoDirectories: fsdp HYBRID_SHARD, 2 machines x 2 ranks, checkpoints at steps 8 and 16.
  The run with two directories is bitwise the run with one (metrics, weights); each machine holds
  its own ranks' files plus the shards it needs, under one manifest naming every machine's files.
  A relaunch resumes every machine from its own checkpoints (from the older step when the
  machines' `latest` differ) and matches the uninterrupted run; merge-weights works on machine 0's
  copy; the machines' directories copied into one resume at world 2 under FULL_SHARD.
- ZeroThreeTwoDirectories: deepspeed zero 3 over 2 machines splits the shards between them, so
  merge-weights of one machine's copy is exit 2 naming machine 1's files and the fix; after the
  copy it gives the run's weights, and a resume at another world size from it matches.
"""
import json
import os
import shutil
import sys
import tempfile
import unittest

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import reference_in_process as ref  # noqa: E402
import trainer_test_support as ts  # noqa: E402
from api_test_support import read_safetensors_arrays  # noqa: E402
from reordering_noise import Run, check_controls, differences, reference_rounding, row  # noqa: E402

sys.path.insert(0, ts.REF)
import safetensors_io  # noqa: E402

STEPS, AT = 16, 8
HYBRID = ("backend=fsdp", "fsdp.sharding_strategy=HYBRID_SHARD")
ZERO3 = ("backend=deepspeed", "deepspeed.zero_stage=3")
FULL_SHARD = ("backend=fsdp", "fsdp.sharding_strategy=FULL_SHARD")
# A resume at another world size reassociates fp32 sums, which AdamW carries into the weights; both
# runs round as any fp32 run of the job does, so they differ by about twice one run's rounding error.
# Bounds (issue 49; they were fixed at |dloss| 1e-4 and |dw| 1e-4 over all tensors, grad norms
# unchecked): derived from the Python reference of the same job (init, rows, steps) in fp32 against
# float64 over the resumed steps, as in test_resharding_end_to_end.py (reordering_noise.
# reference_rounding: 8 x that noise, at least 4 ulps; accel and the reference agree within it:
# test_trainer_end_to_end.py).


class _Base(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls._tmp = tempfile.TemporaryDirectory(prefix="accel_nodelocal_data_")
        cls.tokens = ref.make_tokens(os.path.join(cls._tmp.name, "tok.bin"))
        # Every run starts from the reference's init, so that the reference can train the same job.
        cls.init = ref.export_init(os.path.join(cls._tmp.name, "init.safetensors"))
        cls._reference = None

    @classmethod
    def tearDownClass(cls):
        cls._tmp.cleanup()

    def tmpdir(self):
        d = tempfile.TemporaryDirectory(prefix="accel_nodelocal_")
        self.addCleanup(d.cleanup)
        return d.name

    def job_file(self, d, name, world, micro, resume="auto", out=None):
        job = ts.job(out or os.path.join(d, "unused"), data_path=self.tokens, world=world, micro=micro, steps=STEPS,
                     checkpoint_every=AT, eval_every=0, resume=resume, init_from=self.init)
        return ts.write_job(os.path.join(d, name), job)

    def two_machines(self, job_path, outs, sets):
        """4 ranks on 2 launchers; machine m writes to outs[m] (the same path twice: shared)."""
        procs = ts.launch_machines(job_path, 2, sets=sets,
                                   machine_sets=[(f"training.output_dir={o}",) for o in outs])
        for m, p in enumerate(procs):
            self.assertEqual(p.returncode, 0, f"machine {m}\n{ts.describe(p)}")
        return procs

    def assertSameRun(self, a, b, steps, label):
        ma = {r["step"]: r for r in ts.without_timing(ts.read_metrics(a))}
        mb = {r["step"]: r for r in ts.without_timing(ts.read_metrics(b))}
        wa, wb = (safetensors_io.load_file(os.path.join(o, "weights.safetensors")) for o in (a, b))
        self.assertEqual(sorted(wa), sorted(wb), f"{label}: weight names")
        d_loss = ts.largest_diff((abs(ma[s]["loss"] - mb[s]["loss"]) for s in steps), f"{label}: loss")
        d_w = ts.largest_diff((float((wa[n].double() - wb[n].double()).abs().max()) for n in wa), f"{label}: weights")
        print(f"\n[{label}] steps {steps[0]}..{steps[-1]}: max |dloss| {d_loss:.3e}, max |dw| {d_w:.3e}")
        self.assertEqual([ma[s] for s in steps], [mb[s] for s in steps], f"{label}: metrics differ")
        self.assertEqual(ts.read_bytes(os.path.join(a, "weights.safetensors")),
                         ts.read_bytes(os.path.join(b, "weights.safetensors")), f"{label}: weights differ")

    def assertResumedAgrees(self, a, b, steps, label):
        """Run b, resumed at another world size from run a's checkpoint, against a over `steps`:
        losses, grad norms and final weights within the bounds above."""
        cls = type(self)
        if cls._reference is None:
            d = os.path.join(cls._tmp.name, "reference")
            cls._reference = ref.fp32_and_float64(self.job_file(cls._tmp.name, "reference.yaml", 1, 8),
                                                  d, self.init, 1, 8, 1)
        bounds = reference_rounding(self, *cls._reference, steps=steps)
        runs = [Run(ts.read_metrics(o), read_safetensors_arrays(os.path.join(o, "weights.safetensors")))
                for o in (b, a)]
        diffs = differences(*runs, label, steps)
        print(f"\n[{label}] steps {steps[0]}..{steps[-1]}: {bounds.describe()}\n{row('resumed', diffs, bounds, 8)}\n"
              + check_controls(self, cls._reference[0], bounds))
        bounds.check(self, label, diffs)

    def merge(self, ckpt):
        out = os.path.join(self.tmpdir(), "merged.safetensors")
        return ts.run([ts.ACCEL, "merge-weights", ckpt, "-o", out]), out

    def copy_missing(self, src, dst):
        """The user's merge: the other machine's files into this checkpoint directory (rsync -a)."""
        for name in os.listdir(src):
            if not os.path.exists(os.path.join(dst, name)):
                shutil.copy2(os.path.join(src, name), os.path.join(dst, name))


class HybridShardTwoDirectories(_Base):
    def test_two_directories_checkpoint_resume_and_merge(self):
        d = self.tmpdir()
        shared = os.path.join(d, "shared")
        m0, m1 = os.path.join(d, "machine0"), os.path.join(d, "machine1")
        job = self.job_file(d, "hybrid.yaml", world=4, micro=2)
        procs = self.two_machines(job, (shared, shared), HYBRID)
        self.assertIn("checkpoint storage: output_dir is shared by all 2 machines", procs[0].stdout + procs[0].stderr)
        procs = self.two_machines(job, (m0, m1), HYBRID)
        log = procs[0].stdout + procs[0].stderr
        self.assertIn("checkpoint storage: output_dir is node-local (2 separate storages: machine 0; machine 1)", log)
        self.assertSameRun(shared, m0, list(range(STEPS)), "HYBRID_SHARD 2x2: two directories vs one")

        # Each machine: its own ranks' RNG, both shards of its replica, trainer.json; one manifest.
        ck0, ck1 = ts.ckpt_dir(m0, AT), ts.ckpt_dir(m1, AT)
        shards = ["zero_rank_00000.safetensors", "zero_rank_00001.safetensors"]
        self.assertEqual(sorted(os.listdir(ck0)), ["job.resolved.yaml", "manifest.json", "rng_rank_00000.safetensors",
                                                   "rng_rank_00001.safetensors", "trainer.json"] + shards)
        self.assertEqual(sorted(os.listdir(ck1)), ["manifest.json", "rng_rank_00002.safetensors",
                                                   "rng_rank_00003.safetensors", "trainer.json"] + shards)
        self.assertEqual(ts.read_bytes(os.path.join(ck0, "manifest.json")), ts.read_bytes(os.path.join(ck1, "manifest.json")))
        with open(os.path.join(ck0, "manifest.json")) as f:
            manifest = json.load(f)
        holders = {e["name"]: e["machines"] for e in manifest["files"]}
        self.assertEqual((manifest["version"], manifest["num_machines"]), (2, 2))
        self.assertEqual(holders["rng_rank_00003.safetensors"], [1])
        self.assertEqual(holders["zero_rank_00001.safetensors"], [0, 1])
        self.assertEqual(holders["job.resolved.yaml"], [0])
        self.assertFalse(any(n.startswith(".accel-storage-probe") for n in os.listdir(m1)), "probe marker left behind")

        # Relaunch with resume: auto after machine 1 lost its step 16 (its `latest` is step 8):
        # every machine resumes from step 8, and the run matches the uninterrupted one.
        shutil.rmtree(ts.ckpt_dir(m1, STEPS))
        with open(os.path.join(m1, "checkpoints", "latest"), "w") as f:
            f.write("step_00000008\n")
        before = os.path.join(d, "uninterrupted")
        shutil.copytree(m0, before, ignore=shutil.ignore_patterns("checkpoints"))
        procs = self.two_machines(job, (m0, m1), HYBRID)
        log = procs[0].stdout + procs[0].stderr
        self.assertIn("latest checkpoints differ (steps 8 to 16", log)
        self.assertIn(f"resumed from {ts.ckpt_dir(m0, AT)} (8 steps done)", log)
        self.assertSameRun(before, m0, list(range(AT, STEPS)), "HYBRID_SHARD 2x2 resumed from each machine's own files")

        # merge-weights of machine 0's copy alone: it holds every shard of its replica.
        p, merged = self.merge(os.path.join(m0, "checkpoints"))
        self.assertEqual(p.returncode, 0, ts.describe(p))
        self.assertEqual(ts.read_bytes(merged), ts.read_bytes(os.path.join(m0, "weights.safetensors")))

        # The machines' step 8 directories merged into one resume at world 2 (FULL_SHARD, one machine).
        self.copy_missing(ck1, ck0)
        out = os.path.join(d, "resumed_w2")
        job2 = self.job_file(d, "w2.yaml", world=2, micro=4, resume=ck0, out=out)
        p = ts.launch(job2, sets=FULL_SHARD)
        self.assertEqual(p.returncode, 0, ts.describe(p))
        self.assertResumedAgrees(shared, out, list(range(AT, STEPS)),
                                 "merged HYBRID 2x2 checkpoint -> FULL_SHARD world 2")


class ZeroThreeTwoDirectories(_Base):
    def test_split_shards_need_both_machines(self):
        d = self.tmpdir()
        m0, m1 = os.path.join(d, "machine0"), os.path.join(d, "machine1")
        job = self.job_file(d, "zero3.yaml", world=4, micro=2)
        self.two_machines(job, (m0, m1), ZERO3)
        ck0, ck1 = ts.ckpt_dir(m0, STEPS), ts.ckpt_dir(m1, STEPS)
        self.assertEqual(sorted(n for n in os.listdir(ck1) if n.startswith("zero_rank_")),
                         ["zero_rank_00002.safetensors", "zero_rank_00003.safetensors"])

        p, _ = self.merge(ck0)
        self.assertEqual(p.returncode, 2, ts.describe(p))
        for text in ("zero_rank_00002.safetensors is missing", "node-local storage", "machine 1 holds 4:",
                     "rsync -a", "step_00000016"):
            self.assertIn(text, p.stderr, ts.describe(p))

        self.copy_missing(ck1, ck0)
        p, merged = self.merge(ck0)
        self.assertEqual(p.returncode, 0, ts.describe(p))
        self.assertEqual(ts.read_bytes(merged), ts.read_bytes(os.path.join(m0, "weights.safetensors")))

        # A resume at world 2 from machine 0's step 8 before the merge fails naming machine 1;
        # after copying machine 1's files in, it runs and matches the uninterrupted run.
        c0, c1 = ts.ckpt_dir(m0, AT), ts.ckpt_dir(m1, AT)
        out = os.path.join(d, "w2")
        job2 = self.job_file(d, "w2.yaml", world=2, micro=4, resume=c0, out=out)
        p = ts.launch(job2, sets=ZERO3)
        self.assertNotEqual(p.returncode, 0, ts.describe(p))
        self.assertIn("machine 1 holds", p.stdout + p.stderr, ts.describe(p))
        self.copy_missing(c1, c0)
        shutil.rmtree(out)
        p = ts.launch(job2, sets=ZERO3)
        self.assertEqual(p.returncode, 0, ts.describe(p))
        self.assertResumedAgrees(m0, out, list(range(AT, STEPS)), "zero 3 2x2 node-local merged -> world 2")


if __name__ == "__main__":
    unittest.main()
