"""The one-key switch, run for real: every config template under the other sharding backend.

    ACCEL_BINARY=build/accel PYTHONDONTWRITEBYTECODE=1 \
        scripts/python -m unittest discover -s tests/numerics -p test_backend_switch_end_to_end.py -v

- TemplatesSwitched: every config_templates/deepspeed_*.yaml runs with `--set backend=fsdp` and every
  fsdp_*.yaml with `--set backend=deepspeed` (and natively), for 2 steps of a tiny model: exit 0,
  and the start-up log names the strategy it ran (templates whose resolved jobs are equal share one
  run: zero1 and zero2, cpu and nvme offload, under fsdp); the deepspeed NVMe template (parameters and
  optimizer states in files) also runs natively. What is not built is refused at launch, exit 2,
  naming the key and its file:line:col: layer classes the model does not have. The HYBRID_SHARD
  template runs on two machines (two launchers on loopback).
- FsdpOptionsAtLaunch: fsdp keys with no effect on this path are warnings naming the key; keys that act
  (activation_checkpointing, precision_mode low) say so in the start-up log.

The templates' own sizes (4 ranks, a 4-layer 128-wide model, 100 steps) are overridden with --set:
each run takes a couple of seconds on 2 cores.
"""
import os
import re
import sys
import tempfile
import unittest

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import trainer_test_support as ts  # noqa: E402

TEMPLATES = os.path.join(ts.ROOT, "config_templates")
# Small and fast, whatever the template says: 2 CPU ranks, a 2-block 32-wide model, 2 steps.
TINY = ("num_processes=2", "device=cpu", "collective_timeout_s=60",
        "rendezvous_timeout_s=60", "model.n_layer=2", "model.n_head=2", "model.n_embd=32",
        "model.block_size=16", "training.seq_len=16", "training.micro_batch_size=2", "training.max_steps=2",
        "training.eval_every=0", "training.log_every=1", "scheduler.warmup_steps=1", "data.kind=synthetic",
        "data.val_fraction=0.02")


def templates(prefix):
    return sorted(f for f in os.listdir(TEMPLATES) if f.startswith(prefix) and f.endswith(".yaml"))


class _Base(unittest.TestCase):
    def tmpdir(self):
        d = tempfile.TemporaryDirectory(prefix="accel_switch_")
        self.addCleanup(d.cleanup)
        return d.name

    def launch(self, template, *sets, out=None, port=0):
        """port 0 picks a free one, which only works on one machine."""
        out = out or os.path.join(self.tmpdir(), "out")
        cmd = [ts.ACCEL, "launch", os.path.join(TEMPLATES, template)]
        for s in TINY + (f"training.output_dir={out}", f"main_process_port={port}") + sets:
            cmd += ["--set", s]
        return ts.run(cmd, cwd=self.tmpdir()), out

    def resolved_job(self, template, *sets):
        """What `launch(template, *sets)` runs, output_dir left out: the value lines of `accel config
        show --resolved` (its comments, which name the file each value came from, dropped). The
        workers read only the resolved job (ACCEL_JOB), and --resolved leaves out the other backend's
        block, which the run does not use: two templates with one resolved job are one run."""
        cmd = [ts.ACCEL, "config", "show", "--resolved", os.path.join(TEMPLATES, template)]
        for s in TINY + ("main_process_port=0",) + sets:
            cmd += ["--set", s]
        p = ts.run(cmd, cwd=self.tmpdir())
        self.assertEqual(p.returncode, 0, ts.describe(p))
        values = (re.sub(r"\s+#.*$", "", line) for line in p.stdout.splitlines() if not line.startswith("#"))
        return "\n".join(v for v in values if v.strip() and not v.strip().startswith("output_dir:"))

    def launch_machines(self, template, *sets, processes=2, out=None):
        """The template on 2 machines: 2 launchers on loopback, each with half of `processes`.
        Returns the first failed launcher (else machine 0's) and the output folder."""
        out = out or os.path.join(self.tmpdir(), "out")
        tiny = tuple(s for s in TINY if not s.startswith("num_processes=")) + (f"num_processes={processes}",)
        procs = ts.launch_machines(os.path.join(TEMPLATES, template), 2,
                                   sets=tiny + (f"training.output_dir={out}",) + sets, cwd=self.tmpdir())
        return next((p for p in procs if p.returncode != 0), procs[0]), out

    def assertRan(self, proc, out, label, what):
        self.assertEqual(proc.returncode, 0, f"{what}\n{ts.describe(proc)}")
        self.assertEqual([r["step"] for r in ts.read_metrics(out)], [0, 1], what)
        with open(os.path.join(out, "logs", "rank_0.log")) as f:
            self.assertIn(label + ":", f.read(), f"{what}: the log does not name {label}")


class TemplatesSwitched(_Base):
    # zero_stage -> sharding_strategy (docs/design/0005): 1 and 2 -> SHARD_GRAD_OP, 3 -> FULL_SHARD.
    FSDP_OF = {"deepspeed_zero1.yaml": "SHARD_GRAD_OP", "deepspeed_zero2.yaml": "SHARD_GRAD_OP",
               "deepspeed_zero3.yaml": "FULL_SHARD", "deepspeed_zero3_offload_cpu.yaml": "FULL_SHARD",
               "deepspeed_zero3_offload_nvme.yaml": "FULL_SHARD"}
    ZERO_OF = {"fsdp_full_shard.yaml": 3, "fsdp_shard_grad_op.yaml": 2, "fsdp_offload.yaml": 3,
               "fsdp_hybrid_shard.yaml": 3}

    def test_templates_are_known(self):
        self.assertEqual(sorted(self.FSDP_OF), templates("deepspeed_"))
        self.assertEqual(sorted(self.ZERO_OF), templates("fsdp_"))

    def test_every_deepspeed_template_runs_under_fsdp(self):
        # Templates that differ only in keys the fsdp run does not use resolve to one job (zero_stage 1
        # and 2 both translate to SHARD_GRAD_OP, the cpu and nvme offload templates both to
        # offload_params): that job runs once, and each template's checks read its run. (Run apart,
        # each pair gave the same rank-0 log, timestamps aside, and byte-identical weights.)
        runs = {}  # resolved job -> (exit status and output, output dir)
        for template, strategy in self.FSDP_OF.items():
            with self.subTest(template=template):
                job = self.resolved_job(template, "backend=fsdp")
                self.assertIn("backend: fsdp\n", job)
                self.assertIn(f"\n  sharding_strategy: {strategy}\n", job)
                if job not in runs:
                    runs[job] = self.launch(template, "backend=fsdp")
                p, out = runs[job]
                self.assertRan(p, out, f"fsdp {strategy}", f"{template} --set backend=fsdp")
                if "offload" in template:  # offload_params: true (nvme: nearest), a stated no-op on the CPU
                    with open(os.path.join(out, "logs", "rank_0.log")) as f:
                        self.assertIn("offload to cpu: a no-op on a CPU run", f.read())

    def test_every_fsdp_template_runs_under_deepspeed(self):
        for template, stage in self.ZERO_OF.items():
            if template == "fsdp_hybrid_shard.yaml":
                continue  # two machines: test_hybrid_template_under_deepspeed_on_two_machines
            with self.subTest(template=template):
                p, out = self.launch(template, "backend=deepspeed")
                self.assertRan(p, out, f"deepspeed zero_stage {stage}", f"{template} --set backend=deepspeed")

    def test_hybrid_template_under_deepspeed_on_two_machines(self):
        # HYBRID_SHARD -> zero_stage 3 (+ hpZ, which has no effect yet and says so): the template's two
        # machines are two launchers on loopback, one rank each.
        p, out = self.launch_machines("fsdp_hybrid_shard.yaml", "backend=deepspeed")
        self.assertRan(p, out, "deepspeed zero_stage 3", "fsdp_hybrid_shard.yaml --set backend=deepspeed")

    def test_fsdp_templates_run_natively(self):
        for template, sets, label in (("fsdp_full_shard.yaml", (), "fsdp FULL_SHARD"),
                                      ("fsdp_shard_grad_op.yaml", (), "fsdp SHARD_GRAD_OP"),
                                      ("fsdp_offload.yaml", (), "fsdp FULL_SHARD"),
                                      # bf16 compute: replicated fp32 masters in the sharding engine
                                      ("fsdp_full_shard.yaml", ("fsdp.sharding_strategy=NO_SHARD",), "fsdp NO_SHARD")):
            with self.subTest(template=template, sets=sets):
                p, out = self.launch(template, *sets)
                self.assertRan(p, out, label, template)
                if "NO_SHARD" in label:
                    with open(os.path.join(out, "logs", "rank_0.log")) as f:
                        self.assertIn("replicated fp32 master and optimizer states; compute BFloat16", f.read())

    def test_hybrid_shard_template_on_two_machines_and_on_one(self):
        # 4 ranks over 2 machines: FULL_SHARD within each machine's 2 ranks, replicated across them.
        p, out = self.launch_machines("fsdp_hybrid_shard.yaml", processes=4)
        self.assertRan(p, out, "fsdp HYBRID_SHARD", "fsdp_hybrid_shard.yaml on 2 machines")
        with open(os.path.join(out, "logs", "rank_0.log")) as f:
            log = f.read()
        self.assertIn("in 2 shards", log)
        self.assertIn("replicated on 2 machines", log)
        p, out = self.launch("fsdp_hybrid_shard.yaml", "num_machines=1")
        self.assertRan(p, out, "fsdp HYBRID_SHARD", "fsdp_hybrid_shard.yaml on one machine")
        with open(os.path.join(out, "logs", "rank_0.log")) as f:
            self.assertIn("HYBRID_SHARD on one machine is FULL_SHARD", f.read())

    def test_nvme_offload_template_runs_under_deepspeed(self):
        d = self.tmpdir()
        # Threshold 0: the tiny model's units would all stay gathered under the template's default.
        p, out = self.launch("deepspeed_zero3_offload_nvme.yaml",
                             f"deepspeed.offload_optimizer_nvme_path={d}/optimizer",
                             f"deepspeed.offload_param_nvme_path={d}/params",
                             "deepspeed.stage3_param_persistence_threshold=0")
        self.assertRan(p, out, "deepspeed zero_stage 3", "deepspeed_zero3_offload_nvme.yaml")
        with open(os.path.join(out, "logs", "rank_0.log")) as f:
            log = f.read()
        self.assertIn("master + optimizer states in files under " + d + "/optimizer", log)
        self.assertIn("parameter shards of", log)
        self.assertIn("in files under " + d + "/params", log)

    def test_layer_classes_other_than_the_models_are_refused(self):
        p, out = self.launch("fsdp_full_shard.yaml", "fsdp.transformer_layer_cls_to_wrap=GPT2Block")
        self.assertEqual(p.returncode, 2, ts.describe(p))
        self.assertIn("error: fsdp.transformer_layer_cls_to_wrap: 'GPT2Block' is not a layer class of the gpt model",
                      p.stderr)
        self.assertIn("allowed:", p.stderr)
        self.assertFalse(os.path.exists(out), "nothing may run")

    def test_no_wrap_and_size_based_wrap_run(self):
        # SIZE_BASED_WRAP with min_num_params 1: each Block wrapper, and each module outside them
        # holding parameters (wte, wpe, ln_f: the size policy over the module tree), is a unit.
        for sets, units in ((("fsdp.auto_wrap_policy=NO_WRAP",), "1 units"),
                            (("fsdp.auto_wrap_policy=SIZE_BASED_WRAP", "fsdp.min_num_params=1"), "5 units")):
            with self.subTest(sets=sets):
                p, out = self.launch("fsdp_full_shard.yaml", *sets)
                self.assertRan(p, out, "fsdp FULL_SHARD", " ".join(sets))
                with open(os.path.join(out, "logs", "rank_0.log")) as f:
                    self.assertIn(f"fsdp FULL_SHARD: {units}", f.read())


class FsdpOptionsAtLaunch(_Base):
    def test_keys_with_no_effect_are_warnings_naming_them(self):
        p, out = self.launch("fsdp_full_shard.yaml", "fsdp.cpu_ram_efficient_loading=true",
                             "fsdp.sync_module_states=false")
        self.assertRan(p, out, "fsdp FULL_SHARD", "fsdp with keys of no effect")
        self.assertIn("warning: fsdp.cpu_ram_efficient_loading: true has no effect", p.stderr)
        self.assertIn("warning: fsdp.sync_module_states: false has no effect", p.stderr)
        print(f"\n[warnings] accel said:\n" + "\n".join(l for l in p.stderr.splitlines() if "warning" in l))

    def test_activation_checkpointing_is_a_start_up_note_not_a_warning(self):
        # Built now (docs/design/0010): the start-up log says which units recompute; nothing warns.
        p, out = self.launch("fsdp_full_shard.yaml", "fsdp.activation_checkpointing=true")
        self.assertRan(p, out, "fsdp FULL_SHARD", "fsdp with activation checkpointing")
        self.assertNotIn("warning: fsdp.activation_checkpointing", p.stderr)
        with open(os.path.join(out, "logs", "rank_0.log")) as f:
            self.assertIn("activation_checkpointing: each Block (h.0 .. h.1) keeps only its input and recomputes "
                          "its forward in backward", f.read())

    def test_precision_mode_low_keeps_bf16_masters(self):
        p, out = self.launch("fsdp_full_shard.yaml", "model.dtype=bf16", "fsdp.precision_mode=low")
        self.assertRan(p, out, "fsdp FULL_SHARD", "fsdp precision_mode low")
        with open(os.path.join(out, "logs", "rank_0.log")) as f:
            log = f.read()
        self.assertIn("optimizer states + bf16 master", log)
        self.assertIn("precision_mode low: masters and gradient shards stay bf16", log)


if __name__ == "__main__":
    unittest.main()
