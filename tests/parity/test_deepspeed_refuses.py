"""accel's DeepSpeed JSON checks against DeepSpeed's own parser (the installed deepspeed, 0.19.x).

- Every file in tests/fixtures/bad_json/ is refused by accel (tests/unit/test_deepspeed_json.cpp);
  its .expect says what DeepSpeed (deepspeed.runtime.config.DeepSpeedConfig) and Python's json
  module (Accelerate's reader of a deepspeed_config_file) do with it: "accepts", or a text their
  error must contain. So a fixture cannot claim a refusal DeepSpeed does not make.
- runtime/config/deepspeed_keys.cpp lists, per closed section, exactly the keys DeepSpeed's pydantic
  model accepts (fields and aliases), each of those sections refuses an unknown key, and the
  sections accel only warns about accept one.
Exits 77 (a skip for ctest) where deepspeed cannot be imported.
"""
import json
import logging
import os
import re
import sys
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BAD = os.path.join(ROOT, "tests", "fixtures", "bad_json")
ACCEPTED = os.path.join(ROOT, "tests", "fixtures", "import", "ds_keys_accel_ignores.json")
TABLE = os.path.join(ROOT, "runtime", "config", "deepspeed_keys.cpp")

# The pydantic model behind each section of deepspeed_keys.cpp.
MODELS = {
    "zero_optimization": ("deepspeed.runtime.zero.config", "DeepSpeedZeroConfig"),
    "zero_optimization.offload_param": ("deepspeed.runtime.zero.offload_config", "DeepSpeedZeroOffloadParamConfig"),
    "zero_optimization.offload_optimizer": ("deepspeed.runtime.zero.offload_config",
                                            "DeepSpeedZeroOffloadOptimizerConfig"),
    "zero_optimization.leaf_module": ("deepspeed.runtime.zero.leaf_module_config", "DeepSpeedZeroLeafModuleConfig"),
    "zero_optimization.zenflow": ("deepspeed.runtime.zenflow.zenflow_config", "ZenFlowConfig"),
    "fp16": ("deepspeed.runtime.precision_config", "DeepSpeedFP16Config"),
    "bf16": ("deepspeed.runtime.precision_config", "DeepSpeedBF16Config"),
    "tensorboard": ("deepspeed.monitor.config", "TensorBoardConfig"),
    "wandb": ("deepspeed.monitor.config", "WandbConfig"),
    "csv_monitor": ("deepspeed.monitor.config", "CSVConfig"),
    "comet": ("deepspeed.monitor.config", "CometConfig"),
    "comms_logger": ("deepspeed.comm.config", "CommsLoggerConfig"),
    "hybrid_engine": ("deepspeed.runtime.config", "HybridEngineConfig"),
    "compile": ("deepspeed.compile.config", "CompileConfig"),
    "timers.throughput": ("deepspeed.utils.config", "DeepSpeedThroughputTimerConfig"),
    "tensor_parallel": ("deepspeed.runtime.tensor_parallel.config", "TPTrainingConfig"),
    "weight_quantization": ("deepspeed.inference.config", "WeightQuantConfig"),
}
# Sections where DeepSpeed reads the keys it knows and ignores the rest: accel warns there.
OPEN = ["", "optimizer", "optimizer.params", "scheduler", "scheduler.params", "activation_checkpointing",
        "flops_profiler", "aio", "timers"]


def deepspeed_error(config):
    """The text of DeepSpeedConfig's exception for `config` (a path or a dict), or None if it loads."""
    from deepspeed.runtime.config import DeepSpeedConfig
    try:
        DeepSpeedConfig(config)
    except Exception as e:  # pydantic's ValidationError, DeepSpeedConfigError, hjson's errors, ...
        return " ".join(str(e).split())
    return None


def json_error(path):
    try:
        with open(path) as f:
            json.load(f)
    except ValueError as e:
        return str(e)
    return None


def nested(section, key):
    """A minimal config with `key` set inside `section` ("a.b" nests), ZeRO sections at stage 3."""
    config = {"train_micro_batch_size_per_gpu": 1}
    block = config
    for part in filter(None, section.split(".")):
        block = block.setdefault(part, {})
    block[key] = 1
    if section.startswith("zero_optimization"):
        config["zero_optimization"]["stage"] = 3
    if section in ("optimizer", "scheduler"):
        block["type"] = "AdamW" if section == "optimizer" else "WarmupLR"
    return config


class BadFixtures(unittest.TestCase):
    def test_each_fixture_is_treated_as_its_expect_says(self):
        fixtures = sorted(f for f in os.listdir(BAD) if f.endswith(".json"))
        self.assertGreaterEqual(len(fixtures), 11)
        for name in fixtures:
            path = os.path.join(BAD, name)
            with open(path + ".expect") as f:
                expect = dict(line.rstrip("\n").split(": ", 1) for line in f if not line.startswith("accel: "))
            self.assertEqual(set(expect), {"json", "deepspeed"}, f"{name}.expect names both readers")
            for reader, error in (("json", json_error(path)), ("deepspeed", deepspeed_error(path))):
                with self.subTest(fixture=name, reader=reader):
                    if expect[reader] == "accepts":
                        self.assertIsNone(error)
                    else:
                        self.assertIsNotNone(error, f"{reader} accepts {name}")
                        self.assertIn(expect[reader], error)

    def test_keys_accel_ignores_are_keys_deepspeed_accepts(self):
        self.assertIsNone(json_error(ACCEPTED))
        self.assertIsNone(deepspeed_error(ACCEPTED))


class KeyTable(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        with open(TABLE) as f:
            text = f.read()
        # {"section",\n {"key", "key", ...}},
        cls.table = {m.group(1): re.findall(r'"([^"]+)"', m.group(2))
                     for m in re.finditer(r'\{"([a-z0-9_.]+)",\s*\{([^}]*)\}\}', text)}

    def test_table_lists_every_field_and_alias_of_each_model(self):
        import importlib
        self.assertEqual(set(self.table), set(MODELS))
        for section, (module, name) in MODELS.items():
            model = getattr(importlib.import_module(module), name)
            self.assertEqual(model.model_config.get("extra"), "forbid", section)
            keys = set()
            for field, info in model.model_fields.items():
                keys.add(field)
                if info.alias:
                    keys.add(info.alias)
            with self.subTest(section=section):
                self.assertEqual(set(self.table[section]), keys)

    def test_closed_sections_refuse_an_unknown_key_and_open_ones_accept_it(self):
        for section in MODELS:
            with self.subTest(section=section):
                error = deepspeed_error(nested(section, "not_a_deepspeed_key"))
                self.assertIsNotNone(error)
                self.assertIn("not_a_deepspeed_key", error)
        for section in OPEN:
            with self.subTest(section=section or "top level"):
                self.assertIsNone(deepspeed_error(nested(section, "not_a_deepspeed_key")))


if __name__ == "__main__":
    try:
        import deepspeed  # noqa: F401
    except ImportError as e:
        print(f"SKIPPED: deepspeed cannot be imported ({e})")
        sys.exit(77)
    logging.disable(logging.WARNING)
    unittest.main(warnings="ignore")  # DeepSpeedConfig leaves its file open: a ResourceWarning per load
