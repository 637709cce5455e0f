"""accel::Unit<> end to end (docs/design/0015, design B): examples/units, a user's own module whose
blocks are accel::Unit<> wrappers (the input and output layers outside them: the root), run
through `accel launch` (`program:`) at world 2 under the strategies that free parameters between
uses, and under the others, against the same program at world 1 without sharding.

UnitsAgreement: deepspeed zero_stage 3 without prefetch, fsdp FULL_SHARD with forward prefetch and
BACKWARD_POST, with activation_checkpointing, and HYBRID_SHARD at world 2 (micro batch 4); FULL_SHARD
with activation_checkpointing and accumulation (micro batch 2, 2 micro-steps); SHARD_GRAD_OP with
activation_checkpointing and accumulation; FULL_SHARD at world 4 (micro batch 2). Each has the same
global batch of 8 rows per step as the world-1 run (micro batch 8): per-step losses and final
weights agree within fp32 reassociation.

zero_stage 3 and FULL_SHARD with their default prefetch, each at micro batch 4 and at 2 x 2
micro-steps, run on two other Unit<> models with a root, against world 1 under the same job keys,
batch shapes and bounds: test_public_api_cnn.py (CnnAgreement: zero3, full_shard, zero3_accum,
full_shard_accum, 12 steps, with the start-up line checked as here) and test_public_api_llama.py
(LlamaAgreement: the same four, 4 steps). So are the wrappers as plain calls under ddp and
zero_stage 1 and 2: LlamaAgreement (ddp, zero1, zero2, zero1_accum) and CnnAgreement (ddp, zero1,
zero2).
"""
import os
import tempfile
import unittest

from api_test_support import NOISE_SHAPES, ONE_THREAD, check_against_reference, launch_program, world1_runs
from reordering_noise import derive, report_agreement
from trainer_test_support import ROOT, describe

EXAMPLE = os.environ.get("ACCEL_EXAMPLE_UNITS") or os.path.join(ROOT, "build", "examples", "units",
                                                                "accel_example_units")
STEPS = 8

# As in test_public_api.py: losses are means over the same 8 rows summed in another order (two 4-row
# means averaged, or four 2-row means), so each step's gradient differs from world 1's by fp32
# reassociation; AdamW (lr 3e-3) carries that into the weights over 8 steps. Gathering and releasing
# parameters moves values bit for bit (all-gather of fp32 shards), so stage 3 adds no error of its
# own. The bounds are derived from that reassociation, measured in the test: world 1 again at micro
# 4 x accumulation 2 and 2 x 4 (reordering_noise.py; api_test_support.NOISE_SHAPES); the grad norm
# shows a gradient off by a constant factor, which AdamW trains nearly alike.


def launch(tmp, name, world, micro, accum, strategy):
    return launch_program(tmp, name, EXAMPLE, world, micro, accum, STEPS, strategy, env_extra=ONE_THREAD)


DDP = {"backend": "ddp"}


def zero(stage, **keys):
    # The example's blocks (~4k values) are under DeepSpeed's default persistence threshold (1e5),
    # which would keep them gathered: 0 makes stage 3 release every unit, as FSDP does.
    return {"backend": "deepspeed", "deepspeed": {"zero_stage": stage, "stage3_param_persistence_threshold": 0, **keys}}


def fsdp(strategy, **keys):
    return {"backend": "fsdp", "fsdp": {"sharding_strategy": strategy, **keys}}


class UnitsAgreement(unittest.TestCase):
    def test_sharded_parameters_at_world_2_match_world_1(self):
        self.assertTrue(os.access(EXAMPLE, os.X_OK), f"{EXAMPLE} is not built")
        with tempfile.TemporaryDirectory() as tmp:
            runs = world1_runs(self, lambda name, micro, accum: launch(tmp, name, 1, micro, accum, DDP),
                               ((8, 1),) + NOISE_SHAPES)
            ref = runs[0]
            ref_losses = [r["loss"] for r in ref.metrics]
            self.assertEqual(len(ref_losses), STEPS)
            self.assertLess(ref_losses[-1], ref_losses[0])  # it trains
            self.assertIn("h.2.fc.weight", ref.weights)  # the user's names, no wrapper segment
            bounds = derive(self, runs)
            cases = [("zero3_no_prefetch", zero(3, stage3_prefetch_bucket_size=0), 4, 1, "parameters"),
                     ("full_shard_prefetch", fsdp("FULL_SHARD", forward_prefetch=True, backward_prefetch="BACKWARD_POST"),
                      4, 1, "parameters"),
                     ("hybrid_shard", fsdp("HYBRID_SHARD"), 4, 1, "parameters"),
                     ("full_shard_recompute", fsdp("FULL_SHARD", activation_checkpointing=True), 4, 1, "parameters"),
                     ("full_shard_recompute_accum", fsdp("FULL_SHARD", activation_checkpointing=True), 2, 2,
                      "parameters"),
                     # Gradients found ready per backward pass, each block's recompute a pass of
                     # its own: right as each block is called once per forward.
                     ("shard_grad_op_recompute", fsdp("SHARD_GRAD_OP", activation_checkpointing=True), 2, 2, None)]
            cases = [(name, strategy, 2, micro, accum, sharded) for name, strategy, micro, accum, sharded in cases]
            cases.append(("full_shard_world4", fsdp("FULL_SHARD"), 4, 2, 1, "parameters"))
            worst = {}
            for name, strategy, world, micro, accum, sharded in cases:
                with self.subTest(name):
                    proc, out = launch(tmp, name, world, micro, accum, strategy)
                    self.assertEqual(proc.returncode, 0, describe(proc))
                    if sharded:  # the start-up line: parameters partitioned, only the root kept gathered
                        self.assertIn("gradients, parameters", proc.stdout + proc.stderr)
                        self.assertIn("; 1 small units stay gathered", proc.stdout + proc.stderr)
                    worst[name] = check_against_reference(self, name, out, ref, bounds)
            report_agreement(self, worst, ref, bounds, 26)


if __name__ == "__main__":
    unittest.main()
