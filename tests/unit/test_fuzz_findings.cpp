// What the config fuzzer (tests/fuzz, docs/fuzzing.md) found, each with its minimized input inline:
// every one now fails through the error contract (a ConfigError naming the key and where it was
// set, exit 2) instead of loading a wrapped value or reaching undefined behaviour.
#include <catch2/catch.hpp>

#include <climits>

#include "runtime/config/job_loader.hpp"
#include "support/error_contract.hpp"
#include "support/load_job_file.hpp"
#include "support/temp_dir.hpp"

using namespace accel;
using namespace accel::config;
using accel::test::TempDir;

namespace {

using accel::test::load_unchecked;

// The diagnostics of the ConfigError that loading throws; they must keep the contract. Any other
// exception, or none, fails the test.
std::vector<Diagnostic> fuzz_config_errors(const std::string& file, std::vector<std::string> sets = {}) {
  try {
    load_unchecked(file, std::move(sets));
  } catch (const ConfigError& e) {
    INFO(e.what());
    CHECK(test::contract_violation(e).empty());
    return e.diagnostics();
  } catch (const std::exception& e) {
    FAIL("not a ConfigError: " << e.what());
  }
  FAIL("loading " << file << " succeeded; expected a ConfigError");
  return {};
}

Diagnostic only_error(const std::vector<Diagnostic>& errors) {
  std::string all;
  for (const auto& d : errors) all += d.render() + "\n";
  INFO(all);
  REQUIRE(errors.size() == 1);
  return errors.front();
}

}  // namespace

TEST_CASE("fuzz finding: an integer beyond 32 bits is refused, not wrapped") {
  // `--set training.max_steps=4294967296` loaded as max_steps 0: the int64 parse passed the range
  // check (>= 1), then the int member kept the low 32 bits.
  auto d = only_error(fuzz_config_errors("", {"training.max_steps=4294967296"}));
  CHECK(d.key_path == "training.max_steps");
  CHECK(d.where.str() == "--set training.max_steps=4294967296");
  CHECK(d.message == "value out of range");
  CHECK(d.value == "4294967296");
  CHECK_THAT(d.allowed, Catch::Contains(">= 1") && Catch::Contains("2147483647"));

  TempDir dir;
  auto job = dir.write("job.yaml", "training:\n  seq_len: -2147483649\n");
  auto in_file = only_error(fuzz_config_errors(job));
  CHECK(in_file.key_path == "training.seq_len");
  CHECK(in_file.where.str() == job + ":2:12");

  // The limits themselves still load.
  CHECK(load_unchecked("", {"training.max_steps=2147483647"}).job.training.max_steps == INT_MAX);
}

TEST_CASE("fuzz finding: a DeepSpeed accumulation beyond 32 bits divided by zero") {
  // gradient_accumulation_steps 2^32 wrapped to 0, and the train_batch_size check divided by it.
  TempDir dir;
  auto ds = dir.write("ds.json", "{\"train_batch_size\": 8, \"gradient_accumulation_steps\": 4294967296}");
  auto d = only_error(fuzz_config_errors(ds));
  CHECK(d.key_path == "training.gradient_accumulation_steps");
  CHECK(d.where.str() == ds + ":1:56 (gradient_accumulation_steps)");
  CHECK(d.message == "value out of range");
}

TEST_CASE("fuzz finding: a value derived from train_batch_size must fit its key") {
  // train_batch_size 2^32 with micro batch 1 derived gradient_accumulation_steps = 2^32, stored as 0.
  TempDir dir;
  auto ds = dir.write("ds.json", "{\"train_micro_batch_size_per_gpu\": 1, \"train_batch_size\": 4294967296}");
  auto d = only_error(fuzz_config_errors(ds));
  CHECK(d.key_path == "train_batch_size");
  CHECK(d.where.str() == ds + ":1:59");
  CHECK(d.message == "does not equal micro batch x accumulation x processes");
  CHECK(d.allowed == "1 x 1 x 1 = 1");

  // Just below the limit it derives as before.
  auto fits = dir.write("fits.json", "{\"train_micro_batch_size_per_gpu\": 1, \"train_batch_size\": 2147483647}");
  CHECK(load_unchecked(fits).job.training.gradient_accumulation_steps == INT_MAX);
}

TEST_CASE("fuzz finding: the train_batch_size product overflowed 64 bits") {
  // micro batch x accumulation x processes at their limits is above 2^63: signed overflow (UBSan).
  TempDir dir;
  dir.write("ds.json", "{\"train_batch_size\": 1}");
  auto job = dir.write("job.yaml", "num_processes: 4096\n"
                                   "training: {micro_batch_size: 2147483647, gradient_accumulation_steps: 2147483647}\n"
                                   "deepspeed: {config_file: ds.json}\n");
  auto d = only_error(fuzz_config_errors(job));
  CHECK(d.key_path == "train_batch_size");
  CHECK(d.where.str() == dir.path().string() + "/ds.json:1:22");
  CHECK(d.allowed == "2147483647 x 2147483647 x 4096 = more than 2^63");
}

TEST_CASE("the fuzzer's contract check flags what it must") {
  Diagnostic fine{"training.max_steps", Location::in_file("job.yaml", 3, 14), "value out of range", "0", ">= 1", ""};
  CHECK(test::contract_violation(fine).empty());
  auto fallback = fine;
  fallback.message = std::string(kUnguardedReadMessage) + "bad conversion";
  CHECK_FALSE(test::contract_violation(fallback).empty());
  auto no_line = fine;
  no_line.where = Location::in_file("job.yaml", 0, 0);
  CHECK_FALSE(test::contract_violation(no_line).empty());
  auto nowhere = fine;
  nowhere.key_path.clear();
  nowhere.where = Location::default_value();
  CHECK_FALSE(test::contract_violation(nowhere).empty());
  CHECK_FALSE(test::contract_violation(ConfigError(std::vector<Diagnostic>{})).empty());
}

TEST_CASE("fuzz finding: an empty DeepSpeed config had no position, and a directory read as an empty job") {
  // Kind 2 with nothing after the parent byte: deepspeed.config_file names an empty file, and the
  // error pointed nowhere in it (line 0).
  TempDir dir;
  dir.write("ds.json", "");
  auto job = dir.write("job.yaml", "backend: deepspeed\ndeepspeed:\n  config_file: ds.json\n");
  auto d = only_error(fuzz_config_errors(job));
  CHECK(d.where.str() == dir.path().string() + "/ds.json:1:1");
  CHECK(d.message == "the DeepSpeed config is empty");
  CHECK_THAT(d.hint, Catch::Contains("JSON object"));

  // `--set deepspeed.config_file=DIR` read the directory as an empty document; a directory given as
  // the job itself loaded as "all defaults" (`accel config validate /tmp` said ok).
  auto as_config = only_error(fuzz_config_errors(job, {"deepspeed.config_file=" + dir.path().string()}));
  CHECK(as_config.message == "cannot read the job file");
  CHECK_THAT(as_config.hint, Catch::Contains("directory"));
  auto as_job = only_error(fuzz_config_errors(dir.path().string()));
  CHECK(as_job.message == "cannot read the job file");
  CHECK(as_job.where.file == dir.path().string());

  // A DeepSpeed config that does not exist: the message carries the OS reason after the fixed text,
  // and stays the one file-level error allowed without a position (the suite's fuzz entry
  // called it a broken contract when the exemption matched the whole message).
  auto missing = only_error(fuzz_config_errors(job, {"deepspeed.config_file=" + dir.path().string() + "/absent.json"}));
  CHECK(missing.message == "cannot read the job file: No such file or directory");
  CHECK(test::contract_violation(missing).empty());
}

TEST_CASE("fuzz finding: a YAML flow mapping in a DeepSpeed .json was not JSON and loaded with bf16 off") {
  // Found by mutation fuzzing outside the harness (tests/fuzz/regressions/ds-yaml-flow-mapping-not-json):
  // `"bf16": {"eauto"}` is YAML (a mapping with a null value), so yaml-cpp read it, bf16 stayed off
  // behind one warning, and `accel config validate` said ok; DeepSpeed's loader refuses the file.
  TempDir dir;
  const std::string text = "{\n  \"train_micro_batch_size_per_gpu\": 4,\n  \"bf16\": {\"eauto\"}\n}\n";
  auto ds = dir.write("ds.json", text);
  auto d = only_error(fuzz_config_errors(ds));
  CHECK(d.where.str() == ds + ":3:19");
  CHECK(d.message == "not valid JSON: unexpected '}'");
  CHECK(d.allowed == "':'");
  CHECK_THAT(d.hint, Catch::Contains("Python's json module"));

  // The same file named by deepspeed.config_file, and by an Accelerate config's
  // deepspeed_config_file: DeepSpeed reads it as JSON whatever its name.
  dir.write("named.conf", text);
  auto native = dir.write("job.yaml", "backend: deepspeed\ndeepspeed:\n  config_file: named.conf\n");
  CHECK(only_error(fuzz_config_errors(native)).where.str() == dir.path().string() + "/named.conf:3:19");
  auto accelerate = dir.write("accelerate.yaml",
                              "compute_environment: LOCAL_MACHINE\ndistributed_type: DEEPSPEED\n"
                              "deepspeed_config:\n  deepspeed_config_file: ds.json\n");
  CHECK(only_error(fuzz_config_errors(accelerate)).where.str() == ds + ":3:19");
}
