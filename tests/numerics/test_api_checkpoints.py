"""Accelerator::save_state / load_state end to end (docs/design/0015 "save_state and load_state"):
tests/api/resume_program.cpp, a user's program with a registered data position and schedule, a
buffer, and a feature mask drawn from torch's CPU generator at every micro-step, run through
`accel launch` (`program:`).

ResumeElsewhere: 8 steps uninterrupted under deepspeed zero_stage 2 at world 2 (the reference);
4 steps under the same job, then save_state(); then resumed through the job's training.resume (a
directory) under ddp at world 1, fsdp SHARD_GRAD_OP at world 2 and at world 4, each with the same
global batch (8 rows per micro-step); also NO_SHARD at world 2 and zero_stage 1 at world 4.
Steps 5-8 (losses, learning rates) and the final weights must match the reference. Two negative controls resume at world 1 and then forget the generator
(reseed) or the registered objects (reset): they must NOT match, so the comparison can fail.
ResumeWithAccumulation: the same with 2 micro-steps per step, resumed at world 1 and 4; and a ddp
world-2 checkpoint (replicated layout) resumed under zero_stage 2 at world 4 and SHARD_GRAD_OP at 1.
RestartAfterFailure: a worker dies; max_restarts relaunches and load_state() resumes from `latest`.
NodeLocalStorage: two launchers (machines) with their own output_dir save and resume (auto) bitwise.
BadCheckpoints: a checkpoint with one flipped byte, one that does not fit the module (another
width), and one of the built-in trainer, stop the run with exit 1 and a message naming the file or
the parameter and the fix.
PerRankGenerators: ranks whose generators differ restore them at the same world size (the resume
reproduces the uninterrupted run bit for bit; reseeding instead does not) and warn at another.
WaitForEveryone: no rank leaves wait_for_everyone() before the last one has arrived.
"""
import json
import os
import shutil
import tempfile
import unittest

import numpy as np

import trainer_test_support as ts
from api_test_support import check_against_reference, read_run, read_safetensors_arrays
from reordering_noise import check_controls, derive, fp64_norm_rtol, row
from trainer_test_support import ACCEL, ROOT, describe, largest_diff, read_metrics, run, write_job

PROGRAM = os.environ.get("ACCEL_RESUME_PROGRAM") or os.path.join(ROOT, "build", "tests", "api",
                                                                  "accel_test_resume_program")
STEPS = 8
SAVE_AT = 4
GLOBAL_ROWS = 8  # rows per micro-step over all ranks: world x micro batch

RESUMED_STEPS = range(SAVE_AT + 1, STEPS + 1)

# The resumed runs replay steps 5-8 of the reference with the same data, mask, learning rates and
# optimizer state. What may differ is only the summation order of the averages (gradients, the
# logged loss): at world 1 one mean over 8 rows, at world 2 two 4-row means averaged, at world 4
# four 2-row means: fp32 reassociation, which AdamW (lr 1e-2) carries into the weights over the
# steps. The bounds are derived from that reassociation, measured in each test (reordering_noise.py):
# the saver's job run uninterrupted at world 1 with each micro-step's rows in 2, 1 and 4 parts
# (the program's --chunks: the groupings of world 2, 1 and 4), compared over steps 5-8 and the final
# weights. At world 2 (SHARD_GRAD_OP, NO_SHARD) each rank holds the same 4 rows as in the reference
# and a two-term sum is exact in any order (a + b == b + a), so whatever the collective's
# algorithm those resumes must be bitwise. AdamW trains nearly the same weights from gradients off
# by a constant factor; the grad norm (the pre-clip global norm the program logs) shows a factor of
# 2 (a missing accumulation divisor): 0.5 or 1.
BITWISE = {"shard_grad_op_world2", "no_shard_world2"}
NOISE_CHUNKS = (2, 1, 4)  # the reference's grouping (world 2) first
# The negative controls must miss the reference by far more than that (a wrong mask or position
# changes the loss at the first resumed step by percents).
CONTROL_MIN_LOSS_RDIFF = 1e-3


def job(out, world, strategy, resume="never", accum=1):
    j = {
        "program": [PROGRAM],
        "num_processes": world,
        "device": "cpu",
        "main_process_port": 0,
        "collective_timeout_s": 60,
        "rendezvous_timeout_s": 60,
        "training": {"micro_batch_size": GLOBAL_ROWS // world, "gradient_accumulation_steps": accum,
                     "max_steps": STEPS, "seed": 3, "output_dir": out, "resume": resume},
    }
    j.update(strategy)
    return j


def launch(tmp, name, world, strategy, resume="never", args=(), accum=1):
    out = os.path.join(tmp, name)
    j = job(out, world, strategy, resume, accum)
    j["program"] = [PROGRAM] + list(args)
    path = write_job(os.path.join(tmp, name + ".yaml"), j)
    return run([ACCEL, "launch", path], cwd=tmp), out


DDP = {"backend": "ddp"}
ZERO2 = {"backend": "deepspeed", "deepspeed": {"zero_stage": 2}}
ZERO1 = {"backend": "deepspeed", "deepspeed": {"zero_stage": 1}}


def fsdp(strategy):
    return {"backend": "fsdp", "fsdp": {"sharding_strategy": strategy}}


def bitwise_equal(a, b):
    """The same dtype, shape and values (a NaN equals nothing)."""
    return a.dtype == b.dtype and np.array_equal(a, b)


def noise_bounds(test, tmp, accum=1):
    """Bounds from the job's noise runs at world 1 (NOISE_CHUNKS), over the resumed steps."""
    runs = []
    for chunks in NOISE_CHUNKS:
        proc, out = launch(tmp, f"noise_chunks{chunks}", 1, DDP, args=["--chunks", str(chunks)], accum=accum)
        test.assertEqual(proc.returncode, 0, describe(proc))
        runs.append(read_run(out))
    return derive(test, runs, steps=RESUMED_STEPS)


def compare(test, name, out, ref, bounds):
    """The resumed run in `out` against steps SAVE_AT+1.. and the final weights of the uninterrupted
    run `ref` (a Run), within `bounds`; the learning rates must be equal. Returns the differences."""
    metrics = read_metrics(out)
    test.assertEqual([r["step"] for r in metrics], list(RESUMED_STEPS), name)
    test.assertEqual([r["lr"] for r in metrics], [r["lr"] for r in ref.metrics if r["step"] > SAVE_AT])  # the schedule object
    return check_against_reference(test, name, out, ref, bounds, steps=RESUMED_STEPS)


class ResumeElsewhere(unittest.TestCase):
    def test_zero2_world2_checkpoint_resumes_under_ddp_and_shard_grad_op(self):
        self.assertTrue(os.access(PROGRAM, os.X_OK), f"{PROGRAM} is not built")
        with tempfile.TemporaryDirectory() as tmp:
            proc, ref_out = launch(tmp, "reference", 2, ZERO2)
            self.assertEqual(proc.returncode, 0, describe(proc))
            ref = read_run(ref_out)
            ref_metrics, ref_weights = ref
            self.assertEqual(len(ref_metrics), STEPS)
            bounds = noise_bounds(self, tmp)

            proc, first = launch(tmp, "first", 2, ZERO2, args=["--stop-after", str(SAVE_AT)])
            self.assertEqual(proc.returncode, 0, describe(proc))
            with open(os.path.join(first, "checkpoints", "latest")) as f:
                ckpt = os.path.join(first, "checkpoints", f.read().strip())
            self.assertTrue(ckpt.endswith("step_00000004"), ckpt)
            self.assertEqual(read_metrics(first), ref_metrics[:SAVE_AT])  # the same run so far, bit for bit
            with open(os.path.join(ckpt, "trainer.json")) as f:
                record = json.load(f)
            self.assertEqual(record["writer"], "accel::Accelerator")
            self.assertEqual(record["objects"], {"position": 1, "schedule": 1})
            self.assertEqual(record["backend_state"]["layout"], "zero")
            self.assertTrue(os.path.exists(os.path.join(ckpt, "zero_rank_00001.safetensors")))  # shards stay shards
            with open(os.path.join(ckpt, "manifest.json")) as f:
                rng = {e["fnv1a64"] for e in json.load(f)["files"] if e["name"].startswith("rng_rank_")}
            self.assertEqual(len(rng), 1)  # the same draws on both ranks: one state, every world size gets it
            # The trainer's format: accel merge-weights exports the trained parameters under the module's names.
            merged = os.path.join(tmp, "merged.safetensors")
            proc = run([ACCEL, "merge-weights", ckpt, "-o", merged])
            self.assertEqual(proc.returncode, 0, describe(proc))
            self.assertEqual(sorted(read_safetensors_arrays(merged)),
                             sorted(k for k in ref_weights if k != "micro_steps"))  # the buffer is not the backend's

            worst, controls = {}, {}
            cases = [("ddp_world1", 1, DDP), ("shard_grad_op_world2", 2, fsdp("SHARD_GRAD_OP")),
                     ("shard_grad_op_world4", 4, fsdp("SHARD_GRAD_OP")), ("no_shard_world2", 2, fsdp("NO_SHARD")),
                     ("zero1_world4", 4, ZERO1)]
            for name, world, strategy in cases:
                with self.subTest(name):
                    proc, out = launch(tmp, name, world, strategy, resume=ckpt)
                    self.assertEqual(proc.returncode, 0, describe(proc))
                    worst[name] = compare(self, name, out, ref, bounds)
                    loss, norm, weights = worst[name]
                    if name in BITWISE:
                        self.assertEqual((loss, max(weights.values())), (0.0, 0.0), f"{name}: not bitwise")
                        # The norm is combined from the ranks' shares in fp64, in an order of the
                        # strategy's own: within fp64_norm_rtol of the value count (every saved
                        # tensor counted: at least the gradients'), an analysis for any order (it
                        # was 1e-12 without derivation; measured 1.8e-16).
                        n_values = sum(w.size for w in ref.weights.values())
                        self.assertLessEqual(norm, fp64_norm_rtol(n_values), f"{name}: grad norm")
            for name, flag in [("forgets_rng", "--reset-rng"), ("forgets_objects", "--reset-objects")]:
                with self.subTest(name):
                    proc, out = launch(tmp, name, 1, DDP, resume=ckpt, args=[flag])
                    self.assertEqual(proc.returncode, 0, describe(proc))
                    metrics = read_metrics(out)
                    first_loss = metrics[0]["loss"]
                    ref_loss = ref_metrics[SAVE_AT]["loss"]
                    controls[name] = largest_diff([abs(first_loss - ref_loss) / abs(ref_loss)], name)
                    self.assertGreater(controls[name], CONTROL_MIN_LOSS_RDIFF, f"{name}: the comparison cannot fail")
            print(f"\nresumed from zero_stage 2 world 2 at step 4, against the uninterrupted run "
                  f"(ATEN_CPU_CAPABILITY={os.environ.get('ATEN_CPU_CAPABILITY', 'unset')}), {bounds.describe()}:")
            for name, diffs in worst.items():
                print(row(name, diffs, bounds, 22))
            for name, miss in controls.items():
                print(f"  {name:22s} (control) relative loss miss {miss:.3g} (must exceed {CONTROL_MIN_LOSS_RDIFF:g})")
            print(check_controls(self, ref, bounds))


def save_and_resume(test, saver, resumes, accum=1, label=""):
    """`saver` at world 2 uninterrupted and stopped at SAVE_AT, then each of `resumes` (name, world,
    strategy) from its checkpoint, compared with the uninterrupted run within the derived bounds."""
    with tempfile.TemporaryDirectory() as tmp:
        proc, ref_out = launch(tmp, "reference", 2, saver, accum=accum)
        test.assertEqual(proc.returncode, 0, describe(proc))
        ref = read_run(ref_out)
        bounds = noise_bounds(test, tmp, accum)
        proc, first = launch(tmp, "first", 2, saver, args=["--stop-after", str(SAVE_AT)], accum=accum)
        test.assertEqual(proc.returncode, 0, describe(proc))
        ckpt = os.path.join(first, "checkpoints", "step_00000004")
        for name, world, strategy in resumes:
            with test.subTest(name):
                proc, out = launch(tmp, name, world, strategy, resume=ckpt, accum=accum)
                test.assertEqual(proc.returncode, 0, describe(proc))
                diffs = compare(test, name, out, ref, bounds)
                print(f"\n{label}{name}, {bounds.describe()}:\n{row(name, diffs, bounds, 22)}")


class ResumeWithAccumulation(unittest.TestCase):
    def test_two_micro_steps_per_step_resume_at_world_1_and_4(self):
        # A checkpoint is taken at a step boundary, so the micro-step count restarts at
        # steps x 2 and the next sync micro-step is the second after the resume, as uninterrupted.
        save_and_resume(self, ZERO2, [("ddp_world1", 1, DDP), ("shard_grad_op_world4", 4, fsdp("SHARD_GRAD_OP"))],
                        accum=2, label="zero 2 world 2, accumulation 2 -> ")

    def test_replicated_checkpoint_resumes_sharded(self):
        # The other direction: ddp's replicated layout (model and optimizer files) into shards.
        save_and_resume(self, DDP, [("zero2_world4", 4, ZERO2), ("shard_grad_op_world1", 1, fsdp("SHARD_GRAD_OP"))],
                        label="ddp world 2 -> ")


class NodeLocalStorage(unittest.TestCase):
    def test_two_machines_with_their_own_output_dir_resume_bitwise(self):
        # Two launchers on loopback play two machines of one rank each, each with its own output_dir
        # (docs/design/0013): save_state() writes each machine's files there under one manifest, and
        # load_state() (training.resume: auto) agrees on the latest and resumes both, bitwise the
        # run that never stopped (the same world size: the same reductions).
        with tempfile.TemporaryDirectory() as tmp:
            proc, ref_out = launch(tmp, "reference", 2, ZERO2)
            self.assertEqual(proc.returncode, 0, describe(proc))
            ref_metrics = read_metrics(ref_out)
            ref_weights = read_safetensors_arrays(os.path.join(ref_out, "model.safetensors"))
            dirs = [os.path.join(tmp, f"machine{m}") for m in range(2)]
            sets = [[f"training.output_dir={d}"] for d in dirs]
            for stage, args in [("first", ["--stop-after", str(SAVE_AT)]), ("resumed", [])]:
                j = job(dirs[0], 2, ZERO2, resume="auto")
                j["program"] = [PROGRAM] + args
                path = write_job(os.path.join(tmp, stage + ".yaml"), j)
                procs = ts.launch_machines(path, 2, machine_sets=sets, cwd=tmp)
                for p in procs:
                    self.assertEqual(p.returncode, 0, f"{stage}: " + describe(p))
            for m, d in enumerate(dirs):
                ckpt = os.path.join(d, "checkpoints", "step_00000004")
                self.assertTrue(os.path.exists(os.path.join(ckpt, f"zero_rank_0000{m}.safetensors")))
                self.assertFalse(os.path.exists(os.path.join(ckpt, f"zero_rank_0000{1 - m}.safetensors")))
                self.assertTrue(os.path.exists(os.path.join(ckpt, "objects.safetensors")))
            self.assertEqual(read_metrics(dirs[0]), ref_metrics)  # steps 1-4 kept, 5-8 after the resume
            weights = read_safetensors_arrays(os.path.join(dirs[0], "model.safetensors"))
            for k in ref_weights:
                self.assertTrue(bitwise_equal(weights[k], ref_weights[k]), k)


class RestartAfterFailure(unittest.TestCase):
    def test_a_worker_failure_restarts_and_resumes_from_latest_bitwise(self):
        # max_restarts 1: rank 1 dies after step 5 of the first attempt; the relaunched program's
        # load_state() (training.resume: auto) takes step 4, the latest, and the run ends as the
        # one that never failed, bitwise (the same world size), metrics.jsonl included.
        with tempfile.TemporaryDirectory() as tmp:
            proc, ref_out = launch(tmp, "reference", 2, ZERO2)
            self.assertEqual(proc.returncode, 0, describe(proc))
            out = os.path.join(tmp, "restarted")
            j = job(out, 2, ZERO2, resume="auto")
            j["program"] = [PROGRAM, "--save-every", "2", "--crash-after", "5"]
            j["max_restarts"] = 1
            proc = run([ACCEL, "launch", write_job(os.path.join(tmp, "restarted.yaml"), j)], cwd=tmp)
            self.assertEqual(proc.returncode, 0, describe(proc))
            self.assertIn("accel: loaded " + os.path.join(out, "checkpoints", "step_00000004") + " (4 steps)",
                          proc.stdout + proc.stderr)
            self.assertEqual(read_metrics(out), read_metrics(ref_out))
            weights = read_safetensors_arrays(os.path.join(out, "model.safetensors"))
            ref_weights = read_safetensors_arrays(os.path.join(ref_out, "model.safetensors"))
            for k in ref_weights:
                self.assertTrue(bitwise_equal(weights[k], ref_weights[k]), k)


class BadCheckpoints(unittest.TestCase):
    def test_damaged_and_mismatched_checkpoints_stop_with_the_file_and_the_fix(self):
        with tempfile.TemporaryDirectory() as tmp:
            proc, first = launch(tmp, "first", 2, ZERO2, args=["--stop-after", "2"])
            self.assertEqual(proc.returncode, 0, describe(proc))
            ckpt = os.path.join(first, "checkpoints", "step_00000002")
            with self.subTest("mismatched"):
                proc, out = launch(tmp, "wider", 1, DDP, resume=ckpt, args=["--width", "24"])
                self.assertEqual(proc.returncode, 1, describe(proc))
                text = proc.stdout + proc.stderr
                self.assertIn("does not fit the prepared module", text)
                self.assertIn("'in.weight' is [32, 16] there and [24, 16] here", text)
                self.assertFalse(os.path.exists(os.path.join(out, "metrics.jsonl")))
            with self.subTest("the built-in trainer's checkpoint"):
                trainer_out = os.path.join(tmp, "trainer")
                trainer_job = ts.job(trainer_out, world=1, steps=2, checkpoint_every=2, eval_every=0)
                trainer_job["data"] = {"kind": "synthetic"}
                proc = ts.launch(write_job(os.path.join(tmp, "trainer.yaml"), trainer_job))
                self.assertEqual(proc.returncode, 0, describe(proc))
                trainer_ckpt = os.path.join(trainer_out, "checkpoints", "step_00000002")
                proc, out = launch(tmp, "from_trainer", 1, DDP, resume=trainer_ckpt)
                self.assertEqual(proc.returncode, 1, describe(proc))
                text = proc.stdout + proc.stderr
                self.assertIn("written by accel trainer (model gpt), not by Accelerator::save_state", text)
                self.assertIn("accel merge-weights " + trainer_ckpt, text)
                # and the other way: the trainer refuses the program's checkpoint, naming its writer
                trainer_job["training"]["resume"] = ckpt
                trainer_job["training"]["output_dir"] = os.path.join(tmp, "trainer_from_api")
                proc = ts.launch(write_job(os.path.join(tmp, "trainer_from_api.yaml"), trainer_job))
                self.assertNotEqual(proc.returncode, 0, describe(proc))
                self.assertIn("is not a trainer state: it was written by accel::Accelerator", proc.stdout + proc.stderr)
            with self.subTest("corrupted"):
                damaged = os.path.join(tmp, "damaged")
                shutil.copytree(ckpt, damaged)
                shard = os.path.join(damaged, "zero_rank_00001.safetensors")
                with open(shard, "r+b") as f:
                    f.seek(-3, os.SEEK_END)
                    byte = f.read(1)
                    f.seek(-3, os.SEEK_END)
                    f.write(bytes([byte[0] ^ 0xFF]))
                proc, out = launch(tmp, "from_damaged", 2, fsdp("SHARD_GRAD_OP"), resume=damaged)
                self.assertEqual(proc.returncode, 1, describe(proc))
                self.assertIn(shard + " is corrupted", proc.stdout + proc.stderr)
                self.assertFalse(os.path.exists(os.path.join(out, "metrics.jsonl")))


class PerRankGenerators(unittest.TestCase):
    def test_per_rank_streams_resume_at_the_same_world_size_and_warn_at_another(self):
        with tempfile.TemporaryDirectory() as tmp:
            proc, first = launch(tmp, "first", 2, ZERO2, args=["--stop-after", "2", "--rank-draws"])
            self.assertEqual(proc.returncode, 0, describe(proc))
            ckpt = os.path.join(first, "checkpoints", "step_00000002")
            with open(os.path.join(ckpt, "manifest.json")) as f:
                hashes = {e["name"]: e["fnv1a64"] for e in json.load(f)["files"] if e["name"].startswith("rng_rank_")}
            self.assertEqual(len(set(hashes.values())), 2, hashes)  # the ranks' states differ
            warning = "the ranks' CPU generators differed when it was saved at world size 2"
            proc, same = launch(tmp, "same_world", 2, ZERO2, resume=ckpt, args=["--rank-draws"])
            self.assertEqual(proc.returncode, 0, describe(proc))
            self.assertNotIn(warning, proc.stdout + proc.stderr)
            # Each rank's masks come from its own stream after step 1, so the resume reproduces the
            # uninterrupted run only if every rank got its own generator back: bit for bit (same
            # world, same strategy, same order of every sum).
            proc, whole = launch(tmp, "whole", 2, ZERO2, args=["--rank-draws"])
            self.assertEqual(proc.returncode, 0, describe(proc))
            resumed_steps = lambda out: [r for r in read_metrics(out) if r["step"] > 2]
            self.assertEqual(len(resumed_steps(whole)), STEPS - 2)
            self.assertEqual(resumed_steps(same), resumed_steps(whole))
            self.assertEqual(ts.read_bytes(os.path.join(same, "model.safetensors")),
                             ts.read_bytes(os.path.join(whole, "model.safetensors")))
            # The negative control: one stream reseeded alike on both ranks after the load diverges.
            proc, reseeded = launch(tmp, "reseeded", 2, ZERO2, resume=ckpt, args=["--rank-draws", "--reset-rng"])
            self.assertEqual(proc.returncode, 0, describe(proc))
            self.assertNotEqual(resumed_steps(reseeded), resumed_steps(whole))
            proc, _ = launch(tmp, "other_world", 1, DDP, resume=ckpt, args=["--rank-draws"])
            self.assertEqual(proc.returncode, 0, describe(proc))
            self.assertIn(warning, proc.stdout + proc.stderr)



class WaitForEveryone(unittest.TestCase):
    def test_no_rank_passes_the_barrier_before_the_last_arrives(self):
        # Rank 1 arrives 0.5 s late and leaves a file first; rank 0 checks for it right after
        # wait_for_everyone() and fails the run if it is missing.
        with tempfile.TemporaryDirectory() as tmp:
            proc, _ = launch(tmp, "barrier", 2, DDP, args=["--barrier-check"])
            self.assertEqual(proc.returncode, 0, describe(proc))


if __name__ == "__main__":
    unittest.main()
