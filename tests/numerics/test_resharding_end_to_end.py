"""End-to-end tests of checkpoint resharding and `accel merge-weights` (docs/design/0006).

    ACCEL_BINARY=build/accel PYTHONDONTWRITEBYTECODE=1 \
        scripts/python -m unittest discover -s tests/numerics -p test_resharding_end_to_end.py -v

- ReshardResume: a run checkpoints at step 8 under one backend and world size; a second run resumes
  from that checkpoint under another (zero 2 at world 2 -> world 4, zero 3 at world 2 -> world 3
  with padding, ddp at world 2 -> zero 3 at world 4, zero 1 at world 4 -> ddp at world 2) with the
  same global batch, and its steps 8..15 and final weights match the uninterrupted run's; zero 3
  with nvme offload (optimizer states and parameter shards in files) resumes at world 3. fsdp
  writes the same sharded layout: zero 3 at world 2 -> fsdp FULL_SHARD at world 4, and fsdp
  FULL_SHARD / SHARD_GRAD_OP checkpoints resumed under deepspeed.
- MergeWeights: `accel merge-weights` turns zero (padded, world 3) and ddp checkpoints into exactly
  the run's weights.safetensors; a missing, incomplete or damaged checkpoint is exit 2, naming it.

Same tiny model as test_trainer_end_to_end.py: every run takes a few seconds on 2 cores.
"""
import json
import os
import shutil
import sys
import tempfile
import unittest

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import trainer_test_support as ts  # noqa: E402

sys.path.insert(0, ts.REF)
import safetensors_io  # noqa: E402

ZERO = {s: ("backend=deepspeed", f"deepspeed.zero_stage={s}") for s in (1, 2, 3)}
DDP = ("backend=ddp",)
FSDP = {s: ("backend=fsdp", f"fsdp.sharding_strategy={s}") for s in ("FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD")}
FSDP_HYBRID = ("backend=fsdp", "fsdp.sharding_strategy=HYBRID_SHARD")  # with ts.launch_machines


def merge_weights(ckpt, out):
    return ts.run([ts.ACCEL, "merge-weights", ckpt, "-o", out])


class _Base(unittest.TestCase):
    def tmpdir(self):
        d = tempfile.TemporaryDirectory(prefix="accel_reshard_")
        self.addCleanup(d.cleanup)
        return d.name

    def assertExit(self, proc, code, what):
        self.assertEqual(proc.returncode, code, f"{what}: expected exit {code}\n{ts.describe(proc)}")

    def assertMergeEqualsExport(self, run_dir, what):
        """merge-weights of the run's last checkpoint is byte for byte its weights.safetensors: the
        fp32 masters are the parameters in an fp32 run, written in spec order as the export is."""
        merged = os.path.join(self.tmpdir(), "merged.safetensors")
        p = merge_weights(os.path.join(run_dir, "checkpoints"), merged)
        self.assertExit(p, 0, f"merge-weights {what}")
        self.assertEqual(ts.read_bytes(merged), ts.read_bytes(os.path.join(run_dir, "weights.safetensors")),
                         f"{what}: merged weights differ from weights.safetensors\n{p.stdout}")
        return p


class ReshardResume(_Base):
    STEPS, AT = 16, 8
    # Why not exact: after the resume the gradients are averaged over another number of ranks
    # (all-reduce vs reduce-scatter, per-rank means of 2 vs 4 rows), which reassociates fp32 sums;
    # Adam amplifies that rounding in near-zero gradients to at most O(lr) per step in single
    # elements. Measured over the 8 steps after the switch, all four cases: max |dloss| 3.6e-7,
    # max |dw| 8.3e-7, grad_norm rel 8e-8. Resetting the step counters at the resume instead
    # (Adam's bias correction restarts) gave |dloss| 2.9e-2 and |dw| 1.8e-3: far over these.
    LOSS_TOL = 1e-4
    WEIGHT_TOL = 1e-4
    GRAD_NORM_RTOL = 1e-3

    @classmethod
    def setUpClass(cls):
        cls._tmp = tempfile.TemporaryDirectory(prefix="accel_reshard_data_")
        cls.tokens = ts.make_tokens(os.path.join(cls._tmp.name, "tok.bin"))

    @classmethod
    def tearDownClass(cls):
        cls._tmp.cleanup()

    def _job(self, out, world, micro, **kw):
        return ts.job(out, data_path=self.tokens, world=world, micro=micro, steps=self.STEPS,
                      checkpoint_every=self.AT, eval_every=0, **kw)

    def _resume_elsewhere(self, label, first, second):
        """first/second: (world, micro batch, --set overrides[, machines on loopback]). Returns
        (uninterrupted, resumed) dirs."""
        d = self.tmpdir()
        out_a, out_b = os.path.join(d, "a"), os.path.join(d, "b")
        (wa, ba, sa, ma), (wb, bb, sb, mb) = (tuple(first) + (1,))[:4], (tuple(second) + (1,))[:4]
        self.assertEqual(wa * ba, wb * bb, "both runs must see the same global batch")
        pa = self._launch(ts.write_job(os.path.join(d, "a.yaml"), self._job(out_a, wa, ba)), sa, ma)
        self.assertExit(pa, 0, f"{label}: uninterrupted run")
        ckpt = ts.ckpt_dir(out_a, self.AT)
        pb = self._launch(ts.write_job(os.path.join(d, "b.yaml"), self._job(out_b, wb, bb, resume=ckpt)), sb, mb)
        self.assertExit(pb, 0, f"{label}: resumed run")
        self.assertIn(f"resumed from {ckpt} ({self.AT} steps done)", pb.stdout + pb.stderr, ts.describe(pb))

        a = {r["step"]: r for r in ts.read_metrics(out_a)}
        b = {r["step"]: r for r in ts.read_metrics(out_b)}
        self.assertEqual(sorted(b), list(range(self.AT, self.STEPS)), f"{label}: resumed steps")
        d_loss = ts.largest_diff((abs(a[s]["loss"] - b[s]["loss"]) for s in b), f"{label}: loss")
        d_lr = ts.largest_diff((abs(a[s]["lr"] - b[s]["lr"]) for s in b), f"{label}: lr")
        d_gn = ts.largest_diff((abs(a[s]["grad_norm"] - b[s]["grad_norm"]) / a[s]["grad_norm"] for s in b),
                               f"{label}: grad_norm")
        wa_, wb_ = (safetensors_io.load_file(os.path.join(o, "weights.safetensors")) for o in (out_a, out_b))
        self.assertEqual(list(wa_), list(wb_), f"{label}: weight names")
        d_w = ts.largest_diff((float((wa_[n].double() - wb_[n].double()).abs().max()) for n in wa_),
                              f"{label}: weights")
        print(f"\n[{label}] steps {self.AT}..{self.STEPS - 1} vs uninterrupted: max |dloss| {d_loss:.3e}, "
              f"max |dlr| {d_lr:.3e}, max grad_norm rel {d_gn:.3e}, max |dw| {d_w:.3e}")
        self.assertEqual(d_lr, 0.0, f"{label}: the schedule differs after the resume")
        self.assertLessEqual(d_loss, self.LOSS_TOL, f"{label}: losses differ")
        self.assertLessEqual(d_gn, self.GRAD_NORM_RTOL, f"{label}: grad norms differ")
        self.assertLessEqual(d_w, self.WEIGHT_TOL, f"{label}: final weights differ")
        self.assertSteps(ts.ckpt_dir(out_b, self.STEPS), self.STEPS, label)
        self.assertMergeEqualsExport(out_b, label)
        return out_a, out_b

    def _launch(self, job_path, sets, machines):
        """One launcher, or one per machine on loopback: the first failure (else machine 0's result),
        whose output holds rank 0's log lines."""
        if machines == 1:
            return ts.launch(job_path, sets=sets)
        procs = ts.launch_machines(job_path, machines, sets=sets)
        return next((p for p in procs if p.returncode != 0), procs[0])

    def assertSteps(self, ckpt, steps, label):
        """The optimizer's step counters went on from the resumed checkpoint's (not from 0)."""
        names = os.listdir(ckpt)
        if "optimizer.safetensors" in names:
            t = safetensors_io.load_file(os.path.join(ckpt, "optimizer.safetensors"))
            counts = {k: int(v) for k, v in t.items() if k == "step_count" or k.startswith("step.")}
        else:
            self.assertNotIn("model.safetensors", names, "zero checkpoints no longer gather the model to rank 0")
            counts = {}
            for f in (n for n in names if n.startswith("zero_rank_")):
                t = safetensors_io.load_file(os.path.join(ckpt, f))
                counts.update({f + ":" + k: int(v) for k, v in t.items() if k.endswith(".step")})
        self.assertTrue(counts)
        self.assertEqual(set(counts.values()), {steps}, f"{label}: step counters {counts}")

    def test_zero2_world2_to_world4(self):
        self._resume_elsewhere("zero 2, world 2 -> 4", (2, 4, ZERO[2]), (4, 2, ZERO[2]))

    def test_zero3_world2_to_world3_padded(self):
        _, out_b = self._resume_elsewhere("zero 3, world 2 -> 3", (2, 3, ZERO[3]), (3, 2, ZERO[3]))
        with open(os.path.join(out_b, "logs", "rank_0.log")) as f:
            self.assertRegex(f.read(), r"deepspeed zero_stage 3: \d+ units, \d+ values \([1-9]\d* padding\)")

    def test_zero3_nvme_world2_to_param_nvme_world3(self):
        # Written with the optimizer states and the parameter shards in files (no state is in memory
        # when the layout is recorded), resumed at world 3 with parameter files only: the resharded
        # masters are written to the new parameter files before any gather reads them.
        nvme = self.tmpdir()
        params = ("deepspeed.stage3_param_persistence_threshold=0", "deepspeed.offload_param_device=nvme",
                  f"deepspeed.offload_param_nvme_path={nvme}/params")
        first = ZERO[3] + params + ("deepspeed.offload_optimizer_device=nvme",
                                    f"deepspeed.offload_optimizer_nvme_path={nvme}/optimizer")
        _, out_b = self._resume_elsewhere("zero 3 nvme world 2 -> zero 3 param nvme world 3", (2, 3, first),
                                          (3, 2, ZERO[3] + params))
        with open(os.path.join(out_b, "logs", "rank_0.log")) as f:
            self.assertIn("parameter shards of", f.read())

    def test_ddp_world2_to_zero3_world4(self):
        self._resume_elsewhere("ddp world 2 -> zero 3 world 4", (2, 4, DDP), (4, 2, ZERO[3]))

    def test_zero1_world4_to_ddp_world2(self):
        self._resume_elsewhere("zero 1 world 4 -> ddp world 2", (4, 2, ZERO[1]), (2, 4, DDP))

    def test_zero3_world2_to_fsdp_full_shard_world4(self):
        _, out_b = self._resume_elsewhere("zero 3 world 2 -> fsdp FULL_SHARD world 4", (2, 4, ZERO[3]),
                                          (4, 2, FSDP["FULL_SHARD"]))
        with open(os.path.join(out_b, "logs", "rank_0.log")) as f:
            self.assertIn("fsdp FULL_SHARD:", f.read())

    def test_fsdp_hybrid_2x2_to_full_shard_world2_and_back(self):
        # HYBRID_SHARD splits the states over each machine's 2 ranks; machine 0's ranks write the
        # shards (layout world 2), which FULL_SHARD at world 2 reads as its own. And back: a zero 3
        # world 2 checkpoint resumed by two machines of two ranks, each machine loading the shards.
        hybrid = (4, 2, FSDP_HYBRID, 2)  # world 4 over 2 machines
        out_a, _ = self._resume_elsewhere("fsdp HYBRID_SHARD 2x2 -> FULL_SHARD world 2", hybrid,
                                          (2, 4, FSDP["FULL_SHARD"]))
        ckpt = ts.ckpt_dir(out_a, self.AT)
        with open(os.path.join(ckpt, "trainer.json")) as f:
            state = json.load(f)
        self.assertEqual((state["world_size"], state["backend_state"]["world_size"]), (4, 2))
        self.assertEqual(sorted(n for n in os.listdir(ckpt) if n.startswith("zero_rank_")),
                         ["zero_rank_00000.safetensors", "zero_rank_00001.safetensors"])
        _, out_b = self._resume_elsewhere("zero 3 world 2 -> fsdp HYBRID_SHARD 2x2", (2, 4, ZERO[3]), hybrid)
        with open(os.path.join(out_b, "logs", "rank_0.log")) as f:
            self.assertIn("replicated on 2 machines", f.read())

    def test_fsdp_full_shard_world2_to_zero3_world2(self):
        # The same world size and units: deepspeed reads fsdp's shard files as they are.
        out_a, _ = self._resume_elsewhere("fsdp FULL_SHARD world 2 -> zero 3 world 2", (2, 4, FSDP["FULL_SHARD"]),
                                          (2, 4, ZERO[3]))
        with open(os.path.join(ts.ckpt_dir(out_a, self.AT), "trainer.json")) as f:
            layout = json.load(f)["backend_state"]
        self.assertEqual((layout["layout"], layout["policy"]), ("zero", "fsdp FULL_SHARD"))

    def test_fsdp_low_precision_checkpoint_resumes_under_deepspeed(self):
        # precision_mode low keeps bf16 masters (layout dtype BF16); deepspeed resumes them as fp32
        # masters through the canonical form. Step 8 computes with the same bf16 parameters both ways
        # (fp32(bf16) rounds back to itself), so its loss and grad norm are identical; later steps
        # update in another precision and differ.
        d = self.tmpdir()
        out_a, out_b = os.path.join(d, "a"), os.path.join(d, "b")
        low = FSDP["FULL_SHARD"] + ("model.dtype=bf16", "fsdp.precision_mode=low")
        pa = ts.launch(ts.write_job(os.path.join(d, "a.yaml"), self._job(out_a, 2, 4)), sets=low)
        self.assertExit(pa, 0, "fsdp precision_mode low run")
        ckpt = ts.ckpt_dir(out_a, self.AT)
        with open(os.path.join(ckpt, "trainer.json")) as f:
            self.assertEqual(json.load(f)["backend_state"]["dtype"], "BF16")
        shard = safetensors_io.load_file(os.path.join(ckpt, "zero_rank_00000.safetensors"))
        self.assertEqual(str(shard["h.0.master"].dtype), "torch.bfloat16")
        self.assertEqual(str(shard["h.0.exp_avg"].dtype), "torch.float32")
        pb = ts.launch(ts.write_job(os.path.join(d, "b.yaml"), self._job(out_b, 2, 4, resume=ckpt)),
                       sets=ZERO[3] + ("model.dtype=bf16",))
        self.assertExit(pb, 0, "deepspeed zero 3 resuming the bf16-master checkpoint")
        self.assertIn(f"resumed from {ckpt} ({self.AT} steps done)", pb.stdout + pb.stderr)
        a = {r["step"]: r for r in ts.read_metrics(out_a)}
        b = {r["step"]: r for r in ts.read_metrics(out_b)}
        self.assertEqual((a[self.AT]["loss"], a[self.AT]["grad_norm"]), (b[self.AT]["loss"], b[self.AT]["grad_norm"]))
        merged = os.path.join(d, "merged.safetensors")
        self.assertExit(merge_weights(ckpt, merged), 0, "merge-weights of a bf16-master checkpoint")
        w = safetensors_io.load_file(merged)
        self.assertEqual(str(w["h.0.attn.c_attn.weight"].dtype), "torch.float32")

    def test_fsdp_shard_grad_op_world4_to_zero2_world2(self):
        self._resume_elsewhere("fsdp SHARD_GRAD_OP world 4 -> zero 2 world 2", (4, 2, FSDP["SHARD_GRAD_OP"]),
                               (2, 4, ZERO[2]))


class MergeWeights(_Base):
    @classmethod
    def setUpClass(cls):
        cls._tmp = tempfile.TemporaryDirectory(prefix="accel_merge_")
        d = cls._tmp.name
        ts.make_tokens(os.path.join(d, "tok.bin"))
        cls.runs = {}
        for name, world, micro, sets in (("zero3_w3", 3, 2, ZERO[3]), ("ddp_w2", 2, 4, DDP)):
            out = os.path.join(d, name)
            job = ts.job(out, world=world, micro=micro, steps=6, checkpoint_every=3, eval_every=0)
            p = ts.launch(ts.write_job(os.path.join(d, name + ".yaml"), job), sets=sets)
            if p.returncode != 0:
                raise RuntimeError(f"{name} run failed: " + ts.describe(p))
            cls.runs[name] = out

    @classmethod
    def tearDownClass(cls):
        cls._tmp.cleanup()

    def test_zero3_padded_checkpoint_merges_to_the_exported_weights(self):
        p = self.assertMergeEqualsExport(self.runs["zero3_w3"], "zero 3 world 3")
        self.assertIn("zero layout, 3 rank(s)", p.stdout)

    def test_ddp_checkpoint_merges_to_the_exported_weights(self):
        p = self.assertMergeEqualsExport(self.runs["ddp_w2"], "ddp world 2")
        self.assertIn("replicated layout", p.stdout)

    def test_every_way_of_naming_the_checkpoint(self):
        run = self.runs["zero3_w3"]
        step6 = ts.read_bytes(os.path.join(run, "weights.safetensors"))
        for arg in (run, os.path.join(run, "checkpoints", "latest"), ts.ckpt_dir(run, 6)):
            out = os.path.join(self.tmpdir(), "w.safetensors")
            self.assertExit(merge_weights(arg, out), 0, f"merge-weights {arg}")
            self.assertEqual(ts.read_bytes(out), step6, arg)
        out = os.path.join(self.tmpdir(), "w3.safetensors")
        self.assertExit(merge_weights(ts.ckpt_dir(run, 3), out), 0, "merge-weights step 3")
        self.assertNotEqual(ts.read_bytes(out), step6, "step 3 is not the final state")

    def _damaged_copy(self, damage):
        d = self.tmpdir()
        ckpt = os.path.join(d, "step_00000006")
        shutil.copytree(ts.ckpt_dir(self.runs["zero3_w3"], 6), ckpt)
        bad = damage(ckpt)
        out = os.path.join(d, "w.safetensors")
        p = merge_weights(ckpt, out)
        self.assertExit(p, 2, "merge-weights of a damaged checkpoint")
        self.assertFalse(os.path.exists(out), "nothing may be written from a damaged checkpoint")
        print(f"\n[merge-weights, damaged] accel said:\n{p.stderr.strip()}")
        return p, bad

    def test_a_truncated_shard_is_exit_2_naming_it(self):
        def truncate(ckpt):
            bad = os.path.join(ckpt, "zero_rank_00001.safetensors")
            os.truncate(bad, os.path.getsize(bad) - 16)
            return bad
        p, bad = self._damaged_copy(truncate)
        self.assertIn(bad, p.stderr)
        self.assertIn("truncated", p.stderr)

    def test_a_missing_shard_is_exit_2_naming_it(self):
        def remove(ckpt):
            bad = os.path.join(ckpt, "zero_rank_00002.safetensors")
            os.remove(bad)
            return bad
        p, bad = self._damaged_copy(remove)
        self.assertIn(f"{bad} is missing", p.stderr)

    def test_an_incomplete_or_absent_checkpoint_is_exit_2(self):
        def no_manifest(ckpt):
            os.remove(os.path.join(ckpt, "manifest.json"))
            return ckpt
        p, _ = self._damaged_copy(no_manifest)
        self.assertIn("is not a complete checkpoint", p.stderr)
        absent = os.path.join(self.tmpdir(), "nowhere")
        p = merge_weights(absent, os.path.join(self.tmpdir(), "w.safetensors"))
        self.assertExit(p, 2, "merge-weights of a missing directory")
        self.assertIn(f"checkpoint {absent} does not exist", p.stderr)


if __name__ == "__main__":
    unittest.main()
