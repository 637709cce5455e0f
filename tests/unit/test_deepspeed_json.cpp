// DeepSpeed configs (and .json job files) are read as strict JSON, as Accelerate reads them, and
// refused where DeepSpeed's config models refuse a key: a positioned ConfigError (exit 2), never a
// silent load. tests/fixtures/bad_json/ holds the files, each with a .expect of what accel prints;
// tests/parity/test_deepspeed_refuses.py checks what DeepSpeed and Python's json do with them.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "runtime/config/job_loader.hpp"
#include "runtime/config/json_reader.hpp"
#include "support/error_contract.hpp"
#include "support/load_job_file.hpp"
#include "support/temp_dir.hpp"

using namespace accel;
using namespace accel::config;
using accel::test::TempDir;

namespace {

namespace fs = std::filesystem;
const fs::path kBadJson = fs::path(ACCEL_SOURCE_DIR) / "tests/fixtures/bad_json";

using accel::test::load_unchecked;

// The ConfigError loading throws, which must keep the error contract; anything else fails the test.
ConfigError config_error(const std::string& file, std::vector<std::string> sets = {}) {
  try {
    load_unchecked(file, std::move(sets));
  } catch (const ConfigError& e) {
    INFO(e.what());
    CHECK(test::contract_violation(e).empty());
    return e;
  } catch (const std::exception& e) {
    FAIL("not a ConfigError: " << e.what());
  }
  FAIL("loading " << file << " succeeded; expected a ConfigError");
  return ConfigError(std::vector<Diagnostic>{});
}

Diagnostic only_diagnostic(const ConfigError& e) {
  INFO(e.what());
  REQUIRE(e.diagnostics().size() == 1);
  return e.diagnostics().front();
}

std::string warnings_of(const LoadedJob& job) {
  std::string text;
  for (const auto& w : job.warnings) text += w.render("warning") + "\n";
  return text;
}

}  // namespace

TEST_CASE("every bad DeepSpeed JSON fixture fails with the positioned errors its .expect names") {
  std::vector<fs::path> fixtures;
  for (const auto& e : fs::directory_iterator(kBadJson))
    if (e.path().extension() == ".json") fixtures.push_back(e.path());
  std::sort(fixtures.begin(), fixtures.end());
  REQUIRE(fixtures.size() >= 11);
  for (const auto& fixture : fixtures) {
    SECTION(fixture.filename().string()) {
      std::vector<std::string> expected;
      std::ifstream in(fixture.string() + ".expect");
      for (std::string line; std::getline(in, line);)
        if (line.rfind("accel: ", 0) == 0) expected.push_back(line.substr(7));
      REQUIRE_FALSE(expected.empty());
      std::string text = config_error(fixture.string()).what();
      INFO(text);
      for (const auto& part : expected) CHECK_THAT(text, Catch::Contains(part));
    }
  }
}

TEST_CASE("JSON syntax errors point at the offending character") {
  TempDir dir;
  // A raw newline inside a string: the position is the newline, at the end of line 1.
  auto newline = only_diagnostic(config_error(dir.write("nl.json", "{\"optimizer\": {\"type\": \"Adam\nW\"}}")));
  CHECK(newline.where.line == 1);
  CHECK(newline.where.col == 29);
  CHECK_THAT(newline.message, Catch::Contains("control character"));
  // A file cut short: the position just after its last character.
  auto cut = only_diagnostic(config_error(dir.write("cut.json", "{\n  \"bf16\": {\"enabled\": true}\n")));
  CHECK(cut.where.line == 3);
  CHECK(cut.where.col == 1);
  CHECK_THAT(cut.message, Catch::Contains("end of input"));
  // Python's json writes NaN, but it is not JSON, and DeepSpeed's loader reads it as a string.
  auto nan = only_diagnostic(config_error(dir.write("nan.json", "{\"gradient_clipping\": NaN}")));
  CHECK(nan.where.str() == dir.path().string() + "/nan.json:1:23");
  // A number beyond double: refused at the number, not read as infinity.
  auto huge = only_diagnostic(config_error(dir.write("huge.json", "{\"gradient_clipping\": 1e999}")));
  CHECK(huge.where.line == 1);
  CHECK_THAT(huge.message, Catch::Contains("number overflow"));
}

TEST_CASE("duplicate JSON keys are refused at any depth, as DeepSpeed refuses them") {
  TempDir dir;
  // Inside a block accel never reads (flops_profiler): only the reader's whole-tree check sees it.
  auto file = dir.write("dup.json", "{\n  \"flops_profiler\": {\"enabled\": false,\n    \"enabled\": true},\n"
                                    "  \"steps_per_print\": 10, \"steps_per_print\": 20\n}\n");
  auto errors = config_error(file).diagnostics();
  REQUIRE(errors.size() == 2);
  CHECK(errors[0].key_path == "flops_profiler.enabled");
  CHECK(errors[0].where.str() == file + ":3:5");
  CHECK(errors[0].hint == "first written at " + file + ":2:22; keep one (DeepSpeed refuses duplicate keys)");
  CHECK(errors[1].key_path == "steps_per_print");
  CHECK(errors[1].where.str() == file + ":4:26");
}

TEST_CASE("valid JSON in any layout loads as before") {
  TempDir dir;
  // No spaces, tabs, CRLF line ends, escapes: the values reach the job unchanged.
  auto file = dir.write("tight.json", "{\"train_micro_batch_size_per_gpu\":3,\r\n\t\"gradient_clipping\":\t0.5,"
                                      "\"zero_optimization\":{\"stage\":2},\"bf16\":{\"enabled\":\"auto\"},"
                                      "\"optimizer\":{\"type\":\"AdamW\",\"params\":{\"lr\":1e-3}},"
                                      "\"wandb\":{\"project\":\"r\\u00e9sum\\u00e9\\/x\"}}");
  auto loaded = load_unchecked(file);
  CHECK(loaded.format == FileFormat::DeepSpeed);
  CHECK(loaded.job.training.micro_batch_size == 3);
  CHECK(loaded.job.training.max_grad_norm == 0.5);
  CHECK(loaded.job.deepspeed.zero_stage == 2);
  CHECK(loaded.job.optimizer.lr == 1e-3);
}

TEST_CASE("an empty .json job is an empty DeepSpeed config, not a job of defaults") {
  TempDir dir;
  auto d = only_diagnostic(config_error(dir.write("empty.json", " \n")));
  CHECK(d.message == "the DeepSpeed config is empty");
  CHECK(d.where.line == 1);
  auto list = only_diagnostic(config_error(dir.write("list.json", "[1, 2]")));
  CHECK(list.message == "a DeepSpeed config must be a JSON object");
}

TEST_CASE("valid JSON yaml-cpp cannot read is a positioned error naming the limit") {
  // JSON allows a newline between a key and its ':'; yaml-cpp, which gives the importers their
  // positions, does not. The file is refused with a position rather than read wrongly.
  TempDir dir;
  auto d = only_diagnostic(config_error(dir.write("split.json", "{\"steps_per_print\"\n: 10}")));
  CHECK_THAT(d.message, Catch::StartsWith("valid JSON that accel's reader cannot parse"));
  CHECK(d.where.line >= 1);
  CHECK_THAT(d.hint, Catch::Contains("one line"));
}

TEST_CASE("line_and_column counts from 1 and clamps past the end") {
  const std::string text = "ab\ncd\n";
  CHECK(line_and_column(text, 0) == std::make_pair(1, 1));
  CHECK(line_and_column(text, 2) == std::make_pair(1, 3));  // the newline itself
  CHECK(line_and_column(text, 3) == std::make_pair(2, 1));
  CHECK(line_and_column(text, 99) == std::make_pair(3, 1));
}

TEST_CASE("keys DeepSpeed accepts but accel does not implement load with a warning each") {
  // DeepSpeed 0.19.8 accepts this file (tests/parity/test_deepspeed_refuses.py checks it).
  auto loaded = load_unchecked(std::string(ACCEL_SOURCE_DIR) + "/tests/fixtures/import/ds_keys_accel_ignores.json");
  CHECK(loaded.job.mixed_precision == MixedPrecision::bf16);
  CHECK(loaded.job.deepspeed.zero_stage == 3);
  auto warned = warnings_of(loaded);
  for (const char* key : {"bf16.check_grad_overflow", "zero_optimization.stage3_module_granularity_threshold",
                          "zero_optimization.leaf_module", "zero_optimization.offload_optimizer.pipeline_read",
                          "tensorboard", "timers"})
    CHECK_THAT(warned, Catch::Contains(std::string(key) + ": accel does not act on this DeepSpeed key"));
}

TEST_CASE("where DeepSpeed ignores unknown keys, accel warns about a far one and refuses a near one") {
  TempDir dir;
  // The top level, optimizer.params and scheduler.params are dicts DeepSpeed reads key by key.
  auto file = dir.write("open.json", R"({"train_micro_batch_size_per_gpu": 2, "my_notes": "x",
                                         "optimizer": {"type": "AdamW", "params": {"lr": 0.001, "amsgrad": false}}})");
  auto warned = warnings_of(load_unchecked(file));
  CHECK_THAT(warned, Catch::Contains("my_notes: unknown DeepSpeed key; accel does not act on it"));
  CHECK_THAT(warned, Catch::Contains("optimizer.params.amsgrad: unknown DeepSpeed key; accel does not act on it"));
  auto near = dir.write("near.json", R"({"train_micro_batch_size_per_gpu": 2, "gradient_clippin": 1.0})");
  CHECK(only_diagnostic(config_error(near)).hint == "did you mean 'gradient_clipping'?");
}

TEST_CASE("--set settles a disagreement between a job file and the DeepSpeed JSON it names") {
  // The job says cosine, the DeepSpeed file's WarmupLR says constant: an error naming both places,
  // until the command line (or an ACCEL_* variable) gives the value, which overrides both.
  TempDir dir;
  dir.write("ds.json", R"({"train_micro_batch_size_per_gpu": 8,
    "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 10, "warmup_type": "linear"}}})");
  const std::string job = dir.write("job.yaml", "backend: deepspeed\ndeepspeed:\n  config_file: ds.json\n"
                                                "scheduler:\n  name: cosine\n");
  try {
    test::load_unchecked(job);
    FAIL("the disagreement loaded");
  } catch (const ConfigError& e) {
    REQUIRE(e.diagnostics().size() == 1);
    CHECK(e.diagnostics()[0].key_path == "scheduler.name");
    CHECK_THAT(e.diagnostics()[0].message, Catch::Contains("set twice"));
  }
  auto settled = test::load_unchecked(job, {"scheduler.name=constant"});
  CHECK(settled.job.scheduler.name == config::SchedulerName::constant);
  CHECK(settled.sources.at("scheduler.name").origin == Location::Origin::CommandLine);
  // Within the command line itself a disagreement is still one.
  CHECK_THROWS_AS(test::load_unchecked(job, {"scheduler.name=constant", "scheduler.name=cosine"}), ConfigError);
}

TEST_CASE("a DeepSpeed warm-up left to DeepSpeed's default (a log curve) is refused with the fix") {
  TempDir dir;
  auto scheduler = [&](const std::string& params) {
    return dir.write("ds.json", R"({"train_micro_batch_size_per_gpu": 8, "scheduler": {"type": "WarmupLR")" +
                                    (params.empty() ? std::string() : ", \"params\": " + params) + "}}");
  };
  for (const std::string& params : {std::string(), std::string(R"({"warmup_num_steps": 10})")}) {
    try {
      test::load_unchecked(scheduler(params));
      FAIL("a log warm-up loaded as a linear one: " << params);
    } catch (const ConfigError& e) {
      REQUIRE(e.diagnostics().size() == 1);
      CHECK(e.diagnostics()[0].key_path == "scheduler.params.warmup_type");
      CHECK_THAT(e.diagnostics()[0].message, Catch::Contains("log curve"));
      CHECK_THAT(e.diagnostics()[0].hint, Catch::Contains("\"warmup_type\": \"linear\""));
    }
  }
  CHECK(test::load_unchecked(scheduler(R"({"warmup_num_steps": 10, "warmup_type": "linear"})")).job.scheduler.warmup_steps == 10);
  CHECK(test::load_unchecked(scheduler(R"({"warmup_num_steps": 0})")).job.scheduler.warmup_steps == 0);
}
