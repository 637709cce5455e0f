// Malformed foreign configs (DeepSpeed JSON, Accelerate YAML) fail through the error contract: a
// ConfigError whose diagnostics name the file with line:col, the foreign key path and, for a
// misspelt key, the key it was probably meant to be. Never a raw yaml-cpp exception.
#include <catch2/catch.hpp>

#include <fstream>
#include <regex>
#include <sstream>

#include "runtime/config/job_loader.hpp"
#include "support/temp_dir.hpp"

using namespace accel;
using namespace accel::config;
using accel::test::TempDir;

namespace {

const std::string kFixtures = std::string(ACCEL_SOURCE_DIR) + "/tests/fixtures/import/";

LoadedJob load_bad_import(const std::string& file, std::vector<std::string> sets = {}) {
  LoadOptions o;
  o.file = file;
  o.set_overrides = std::move(sets);
  return load_job(o);
}

// The diagnostics of the ConfigError that loading throws. Any other exception, or none, fails.
std::vector<Diagnostic> import_errors(const std::string& file, std::vector<std::string> sets = {}) {
  try {
    load_bad_import(file, std::move(sets));
  } catch (const ConfigError& e) {
    return e.diagnostics();
  } catch (const std::exception& e) {
    FAIL("not a ConfigError: " << e.what());
  }
  FAIL("loading " << file << " succeeded; expected a ConfigError");
  return {};
}

// The one diagnostic about `key_path`; fails the test when there is none.
Diagnostic about(const std::vector<Diagnostic>& errors, const std::string& key_path) {
  std::string all;
  for (const auto& d : errors) {
    if (d.key_path == key_path) return d;
    all += d.render() + "\n";
  }
  FAIL("no error about " << key_path << " in:\n" << all);
  return {};
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

TEST_CASE("a misspelt key inside bf16 or fp16 is a positioned error with a suggestion") {
  TempDir dir;
  // The fuzzer's input: yaml-cpp threw InvalidNode ("first invalid key: enabled") here.
  auto bf16 = dir.write("bf16.json", "{\n  \"train_micro_batch_size_per_gpu\": 4,\n  \"bf16\": {\"Jnabled\": \"auto\"}\n}\n");
  auto d = about(import_errors(bf16), "bf16.Jnabled");
  CHECK(d.where.str() == bf16 + ":3:12");
  CHECK(d.message == "unknown DeepSpeed key");
  CHECK(d.hint == "did you mean 'enabled'?");
  CHECK_THAT(d.render(), Catch::Contains("bf16.json:3:12: error: bf16.Jnabled: unknown DeepSpeed key"));

  auto fp16 = dir.write("fp16.json", "{\n  \"fp16\": {\n    \"enabled\": true,\n    \"loss_scael\": 0\n  },\n"
                                     "  \"bf16\": {\"enabld\": true}\n}\n");
  auto errors = import_errors(fp16);
  auto scale = about(errors, "fp16.loss_scael");
  CHECK(scale.where.str() == fp16 + ":4:5");
  CHECK(scale.hint == "did you mean 'loss_scale'?");
  CHECK_THAT(scale.allowed, Catch::Contains("initial_scale_power"));
  CHECK(about(errors, "bf16.enabld").hint == "did you mean 'enabled'?");

  // fp16 missing "enabled" while bf16 is on: the both-enabled check must not throw either.
  auto no_enabled = dir.write("no_enabled.json", R"({"fp16": {"Enabled": true}, "bf16": {"enabled": true}})");
  CHECK(about(import_errors(no_enabled), "fp16.Enabled").hint == "did you mean 'enabled'?");
}

TEST_CASE("misspelt keys in zero_optimization and its offload blocks are positioned errors") {
  TempDir dir;
  auto file = dir.write("zero.json",
                        "{\n"
                        "  \"zero_optimization\": {\n"
                        "    \"stag\": 3,\n"
                        "    \"offload_optimizer\": {\"devise\": \"cpu\"},\n"
                        "    \"offload_param\": {\"device\": \"cpu\", \"pin_memroy\": true},\n"
                        "    \"overlap_com\": true\n"
                        "  }\n"
                        "}\n");
  auto errors = import_errors(file);
  CHECK(about(errors, "zero_optimization.stag").where.str() == file + ":3:5");
  CHECK(about(errors, "zero_optimization.stag").hint == "did you mean 'stage'?");
  auto device = about(errors, "zero_optimization.offload_optimizer.devise");
  CHECK(device.where.str() == file + ":4:27");
  CHECK(device.hint == "did you mean 'device'?");
  CHECK(about(errors, "zero_optimization.offload_param.pin_memroy").hint == "did you mean 'pin_memory'?");
  CHECK(about(errors, "zero_optimization.overlap_com").hint == "did you mean 'overlap_comm'?");

  // DeepSpeed's unprefixed stage3 spellings are real keys, not typos of the prefixed ones.
  auto aliases = dir.write("aliases.json", R"({"zero_optimization": {"stage": 3, "param_persistence_threshold": 100,
                                                "model_persistence_threshold": 1000}})");
  auto loaded = load_bad_import(aliases);
  CHECK(loaded.job.deepspeed.stage3_param_persistence_threshold == 100);
}

TEST_CASE("a misspelt key in an Accelerate fsdp_config or deepspeed_config is a positioned error") {
  TempDir dir;
  auto fsdp = dir.write("fsdp.yaml",
                        "compute_environment: LOCAL_MACHINE\n"
                        "distributed_type: FSDP\n"
                        "fsdp_config:\n"
                        "  fsdp_sharding_stratgy: FULL_SHARD\n"
                        "  sharding_strategy: FULL_SHARD\n");
  auto errors = import_errors(fsdp);
  auto d = about(errors, "fsdp_config.fsdp_sharding_stratgy");
  CHECK(d.where.str() == fsdp + ":4:3");
  CHECK(d.message == "unknown Accelerate key");
  CHECK(d.hint == "did you mean 'fsdp_sharding_strategy'?");
  CHECK(about(errors, "fsdp_config.sharding_strategy").hint == "did you mean 'fsdp_sharding_strategy'?");

  auto ds = dir.write("ds.yaml",
                      "compute_environment: LOCAL_MACHINE\n"
                      "distributed_type: DEEPSPEED\n"
                      "deepspeed_config:\n"
                      "  zero_stage: 2\n"
                      "  ofload_optimizer_device: cpu\n"
                      "mixed_precison: bf16\n");
  errors = import_errors(ds);
  d = about(errors, "deepspeed_config.ofload_optimizer_device");
  CHECK(d.where.str() == ds + ":5:3");
  CHECK(d.hint == "did you mean 'offload_optimizer_device'?");
  CHECK(about(errors, "mixed_precison").where.str() == ds + ":6:1");
  CHECK(about(errors, "mixed_precison").hint == "did you mean 'mixed_precision'?");
}

TEST_CASE("an unknown foreign key far from every known one stays a warning where DeepSpeed ignores it") {
  TempDir dir;
  // DeepSpeed reads its top level key by key; zero_optimization is a closed model, where an
  // unknown key is an error (test_deepspeed_json.cpp).
  auto file = dir.write("ds.json", R"({"zero_optimization": {"stage": 2}, "torch_autocast": {}})");
  auto loaded = load_bad_import(file);
  std::string warned;
  for (const auto& w : loaded.warnings) warned += w.render("warning") + "\n";
  CHECK_THAT(warned, Catch::Contains("torch_autocast: unknown DeepSpeed key; accel does not act on it"));
}

TEST_CASE("DeepSpeed JSON values of the wrong shape are positioned errors") {
  TempDir dir;
  auto file = dir.write("shape.json",
                        "{\n"
                        "  \"train_batch_size\": [64],\n"
                        "  \"fp16\": true,\n"
                        "  \"bf16\": {\"enabled\": [true]},\n"
                        "  \"zero_optimization\": {\"stage\": [3], \"offload_param\": \"cpu\"},\n"
                        "  \"optimizer\": {\"type\": \"AdamW\", \"params\": \"lr\"},\n"
                        "  \"scheduler\": {\"type\": \"WarmupLR\", \"params\": [1, 2]}\n"
                        "}\n");
  auto errors = import_errors(file);
  CHECK(about(errors, "train_batch_size").where.str() == file + ":2:23");
  CHECK(about(errors, "train_batch_size").message == "expected an integer >= 1");
  auto fp16 = about(errors, "fp16");  // a scalar where a block is expected
  CHECK(fp16.where.str() == file + ":3:11");
  CHECK(fp16.message == "expected a mapping of keys to values");
  auto enabled = about(errors, "bf16.enabled");  // a list where a boolean is expected
  CHECK(enabled.where.str() == file + ":4:23");
  CHECK(enabled.message == "expected a boolean");
  // A mapped value is checked against the accel key it feeds; its source names the foreign key.
  auto stage = about(errors, "deepspeed.zero_stage");
  CHECK(stage.where.str() == file + ":5:34 (zero_optimization.stage)");
  CHECK_THAT(stage.message, Catch::Contains("expected"));
  CHECK(about(errors, "zero_optimization.offload_param").where.str() == file + ":5:56");
  CHECK(about(errors, "optimizer.params").where.str() == file + ":6:44");
  CHECK(about(errors, "scheduler.params").where.str() == file + ":7:47");
  CHECK(about(errors, "scheduler.params").message == "expected a mapping of keys to values");
}

TEST_CASE("Accelerate YAML values of the wrong shape are positioned errors") {
  TempDir dir;
  auto file = dir.write("shape.yaml",
                        "compute_environment: LOCAL_MACHINE\n"
                        "distributed_type: FSDP\n"
                        "use_cpu: [true]\n"
                        "deepspeed_config: [1, 2]\n"
                        "fsdp_config:\n"
                        "  fsdp_sharding_strategy: [1]\n"
                        "  fsdp_reshard_after_forward: {a: 1}\n"
                        "  fsdp_backward_prefetch: [BACKWARD_PRE]\n");
  auto errors = import_errors(file);
  CHECK(about(errors, "use_cpu").where.str() == file + ":3:10");
  CHECK(about(errors, "use_cpu").message == "expected a boolean");
  CHECK(about(errors, "deepspeed_config").where.str() == file + ":4:19");
  CHECK(about(errors, "deepspeed_config").message == "expected a mapping of keys to values");
  CHECK(about(errors, "fsdp.sharding_strategy").where.str() == file + ":6:27 (fsdp_config.fsdp_sharding_strategy)");
  CHECK(about(errors, "fsdp_config.fsdp_reshard_after_forward").where.str() == file + ":7:31");
  CHECK(about(errors, "fsdp.backward_prefetch").where.str() == file + ":8:27 (fsdp_config.fsdp_backward_prefetch)");

  auto scalar = dir.write("scalar.yaml", "compute_environment: LOCAL_MACHINE\ndistributed_type: FSDP\nfsdp_config: FULL_SHARD\n");
  auto d = about(import_errors(scalar), "fsdp_config");
  CHECK(d.where.str() == scalar + ":3:14");
  CHECK(d.hint == "indent its keys under 'fsdp_config:'");
}

TEST_CASE("a DeepSpeed JSON named by deepspeed.config_file or --set reports its own positions") {
  TempDir dir;
  auto json = dir.write("ds.json", "{\n  \"bf16\": {\"Jnabled\": true},\n  \"zero_optimization\": [2]\n}\n");
  auto job = dir.write("job.yaml", "backend: deepspeed\ndeepspeed:\n  config_file: ds.json\n");
  auto errors = import_errors(job);
  CHECK(about(errors, "bf16.Jnabled").where.str() == json + ":2:12");
  CHECK(about(errors, "zero_optimization").where.str() == json + ":3:24");

  auto plain = dir.write("plain.yaml", "backend: deepspeed\n");
  errors = import_errors(plain, {"deepspeed.config_file=" + json});
  CHECK(about(errors, "bf16.Jnabled").hint == "did you mean 'enabled'?");

  // --set values are YAML too: a list where a number is expected is a typed error, not an exception.
  errors = import_errors(plain, {"training.max_steps=[1, 2]"});
  CHECK(about(errors, "training.max_steps").where.str() == "--set training.max_steps=[1, 2]");
}

// A small deterministic version of the mutation fuzzer that found the bug: every key of the import
// fixtures (and of two native templates) misspelt, and every scalar value replaced by a list, a
// mapping and null. Each variant must load or fail with a ConfigError; nothing else may escape.
TEST_CASE("mutated config files load or fail with a ConfigError, never another exception") {
  TempDir dir;
  const std::regex json_entry(R"re(^(\s*)"(\w)(\w*)"(\s*:\s*)([^{\[,]*?)(,?)\s*$)re");
  const std::regex yaml_entry(R"re(^(\s*)(\w)(\w*)(:\s*)(.*?)()\s*$)re");
  int variants = 0, config_errors_seen = 0;
  const std::string templates = std::string(ACCEL_SOURCE_DIR) + "/config_templates/";
  for (const std::string& path : {kFixtures + "ds_config_auto.json", kFixtures + "accelerate_fsdp.yaml",
                                  kFixtures + "accelerate_deepspeed.yaml", templates + "fsdp_hybrid_shard.yaml",
                                  templates + "deepspeed_zero3_offload_nvme.yaml"}) {
    std::string name = path.substr(path.rfind('/') + 1);
    std::string text = read_text(path);
    bool json = name.find(".json") != std::string::npos;
    std::vector<std::string> lines;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    for (size_t i = 0; i < lines.size(); ++i) {
      std::smatch m;
      if (!std::regex_match(lines[i], m, json ? json_entry : yaml_entry)) continue;
      std::string q = json ? "\"" : "";
      std::string indent = m[1], first = m[2], rest = m[3], colon = m[4], value = m[5], comma = m[6];
      std::vector<std::string> mutated = {indent + q + "J" + rest + q + colon + value + comma};
      if (!value.empty())
        for (const char* v : {"[1]", "{\"a\": 1}", "null"}) mutated.push_back(indent + q + first + rest + q + colon + v + comma);
      for (const auto& line : mutated) {
        auto copy = lines;
        copy[i] = line;
        std::string doc;
        for (const auto& l : copy) doc += l + "\n";
        auto file = dir.write(std::string("m") + std::to_string(variants++) + (json ? ".json" : ".yaml"), doc);
        INFO("mutated line " << i + 1 << " of " << name << ": " << line);
        LoadOptions options;
        options.file = file;
        options.check_paths = false;  // the templates name data files next to them
        try {
          load_job(options);
        } catch (const ConfigError&) {
          ++config_errors_seen;
        } catch (const std::exception& e) {
          FAIL("escaped the error contract: " << e.what());
        }
      }
    }
  }
  CHECK(variants > 200);
  CHECK(config_errors_seen > 0);
}
