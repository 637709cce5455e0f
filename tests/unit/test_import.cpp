// Accelerate config files and DeepSpeed JSON import to the expected native jobs; keys accel does
// not act on are warned about by name; values accel cannot honour are errors.
#include <catch2/catch.hpp>

#include "runtime/config/dump.hpp"
#include "runtime/config/job_loader.hpp"
#include "support/temp_dir.hpp"

using namespace accel;
using namespace accel::config;

namespace {

const std::string kImportFixtures = std::string(ACCEL_SOURCE_DIR) + "/tests/fixtures/import/";

LoadedJob load_imported(const std::string& file, std::vector<std::string> sets = {}) {
  LoadOptions o;
  o.file = file;
  o.set_overrides = std::move(sets);
  return load_job(o);
}

std::string full(const LoadedJob& j) { return dump_job(j.job, j.sources, DumpStyle::Full); }

std::string warnings_text(const LoadedJob& j) {
  std::string text;
  for (const auto& w : j.warnings) text += w.render("warning") + "\n";
  return text;
}

std::string notes_text(const LoadedJob& j) {
  std::string text;
  for (const auto& n : j.notes) text += n + "\n";
  return text;
}

}  // namespace

TEST_CASE("an Accelerate FSDP config imports to the expected native job") {
  auto imported = load_imported(kImportFixtures + "accelerate_fsdp.yaml");
  CHECK(imported.format == FileFormat::Accelerate);
  CHECK(full(imported) == full(load_imported(kImportFixtures + "accelerate_fsdp.expected.yaml")));
  CHECK(imported.job.fsdp.sharding_strategy == ShardingStrategy::SHARD_GRAD_OP);  // written as the number 2
  CHECK(imported.sources.at("fsdp.sharding_strategy").str() ==
        kImportFixtures + "accelerate_fsdp.yaml:15:27 (fsdp_config.fsdp_sharding_strategy)");

  auto warned = warnings_text(imported);
  CHECK_THAT(warned, Catch::Contains("dynamo_config: accel does not act on this Accelerate key"));
  CHECK_THAT(warned, Catch::Contains("gpu_ids: accel does not act on this Accelerate key"));
  CHECK_THAT(warned, Catch::Contains("accelerate_fsdp.yaml:20:3: warning: fsdp_config.fsdp_made_up_option: unknown "
                                     "Accelerate key"));
  // Neutral values are noted, not warned, but still named: nothing is dropped silently.
  CHECK_THAT(warned, !Catch::Contains("tpu_use_sudo"));
  CHECK_THAT(notes_text(imported), Catch::Contains("tpu_use_sudo: ignored at its neutral value false") &&
                                       Catch::Contains("fsdp_config.fsdp_use_orig_params: ignored"));
}

TEST_CASE("an Accelerate DeepSpeed config imports to the expected native job") {
  auto imported = load_imported(kImportFixtures + "accelerate_deepspeed.yaml");
  CHECK(full(imported) == full(load_imported(kImportFixtures + "accelerate_deepspeed.expected.yaml")));
  CHECK(imported.job.device == Device::cpu);  // use_cpu: true
  CHECK(imported.job.training.max_grad_norm == Approx(0.5));
  CHECK(imported.sources.at("training.max_grad_norm").str() ==
        kImportFixtures + "accelerate_deepspeed.yaml:6:22 (deepspeed_config.gradient_clipping)");
  CHECK_THAT(notes_text(imported), Catch::Contains("deepspeed_config.deepspeed_multinode_launcher: ignored"));
}

TEST_CASE("an Accelerate config's rdzv_backend etcd selects the etcd rendezvous; static and c10d stay the default") {
  accel::test::TempDir dir;
  const std::string head = "compute_environment: LOCAL_MACHINE\ndistributed_type: MULTI_CPU\nnum_processes: 2\n";
  const std::string file = dir.write("etcd.yaml", head + "rdzv_backend: etcd\n");
  auto etcd = load_imported(file, {"num_machines=1:2", "rdzv_endpoint=10.0.0.5:2379"});
  CHECK(etcd.job.rdzv_backend == RdzvBackend::etcd);
  CHECK(etcd.sources.at("rdzv_backend").str() == file + ":4:15 (rdzv_backend)");
  for (const char* value : {"static", "c10d"}) {
    auto plain = load_imported(dir.write(std::string(value) + ".yaml", head + "rdzv_backend: " + value + "\n"));
    CHECK(plain.job.rdzv_backend == RdzvBackend::static_);
    CHECK_THAT(notes_text(plain), Catch::Contains("rdzv_backend: ignored"));
  }
}

TEST_CASE("a DeepSpeed JSON with auto values imports; train_batch_size derives the accumulation") {
  auto imported = load_imported(kImportFixtures + "ds_config_auto.json");
  CHECK(imported.format == FileFormat::DeepSpeed);
  CHECK(full(imported) == full(load_imported(kImportFixtures + "ds_config_auto.expected.yaml")));
  CHECK(imported.job.training.gradient_accumulation_steps == 8);  // 64 / (8 x 1 process)
  CHECK(imported.sources.at("training.gradient_accumulation_steps").origin == Location::Origin::Derived);
  CHECK(imported.job.mixed_precision == MixedPrecision::no);       // "auto" keeps accel's value
  auto notes = notes_text(imported);
  // Each "auto" names what it became and where that came from.
  CHECK_THAT(notes, Catch::Contains("optimizer.params.lr: \"auto\" -> optimizer.lr: ") && Catch::Contains("(accel's default)"));
  CHECK_THAT(notes, Catch::Contains("bf16.enabled: \"auto\" -> mixed_precision: \"no\" (accel's default)"));
  auto set = load_imported(kImportFixtures + "ds_config_auto.json", {"mixed_precision=bf16"});
  CHECK_THAT(notes_text(set), Catch::Contains("bf16.enabled: \"auto\" -> mixed_precision: bf16 (--set mixed_precision=bf16)"));
  auto warned = warnings_text(imported);
  CHECK_THAT(warned, Catch::Contains("zero_optimization.sub_group_size: accel does not act on this DeepSpeed key"));
  CHECK_THAT(warned, Catch::Contains("flops_profiler: accel does not act on this DeepSpeed key"));
  CHECK_THAT(warned, Catch::Contains("deepspeed.initial_scale_power: has no effect: loss scaling applies to fp16 only"));
}

TEST_CASE("DeepSpeed's torch_adam picks the unfused AdamW; false keeps the fused kernel on a GPU") {
  accel::test::TempDir dir;
  for (bool torch_adam : {true, false}) {
    auto file = dir.write(torch_adam ? "torch.json" : "fused.json",
                          std::string(R"({"optimizer": {"type": "AdamW", "params": {"lr": 0.001, "torch_adam": )") +
                              (torch_adam ? "true" : "false") + "}}}");
    auto imported = load_imported(file);
    CHECK(imported.job.optimizer.fused == (torch_adam ? FusedKernel::no : FusedKernel::auto_));
    CHECK(imported.sources.at("optimizer.fused").str().find("optimizer.params.torch_adam") != std::string::npos);
  }
}

TEST_CASE("an Accelerate config naming a DeepSpeed JSON merges both; the world size enters the batch") {
  auto imported = load_imported(kImportFixtures + "accelerate_deepspeed_file.yaml");
  CHECK(full(imported) == full(load_imported(kImportFixtures + "accelerate_deepspeed_file.expected.yaml")));
  CHECK(imported.job.deepspeed.zero_stage == 3);
  CHECK(imported.job.training.gradient_accumulation_steps == 4);  // 64 / (8 x 2 processes)
  CHECK(imported.job.deepspeed.config_file == kImportFixtures + "ds_config_auto.json");
}

TEST_CASE("a job file and its DeepSpeed JSON that disagree is an error naming both") {
  accel::test::TempDir dir;
  dir.write("ds.json", R"({"zero_optimization": {"stage": 1}, "train_micro_batch_size_per_gpu": 4})");
  auto job = dir.write("job.yaml", "backend: deepspeed\ndeepspeed:\n  config_file: ds.json\n  zero_stage: 2\n");
  try {
    load_imported(job);
    FAIL("expected a conflict");
  } catch (const ConfigError& e) {
    std::string text = e.what();
    CHECK_THAT(text, Catch::Contains("job.yaml:4:15: error: deepspeed.zero_stage: set twice with different values"));
    CHECK_THAT(text, Catch::Contains("also set to 1 at " + (dir.path() / "ds.json").string() + ":1:33 (zero_optimization.stage)"));
  }
}

TEST_CASE("inconsistent DeepSpeed batch sizes and unsupported values are refused") {
  accel::test::TempDir dir;
  auto bad_batch = dir.write("b.json", R"({"train_batch_size": 30, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2})");
  CHECK_THROWS_WITH(load_imported(bad_batch), Catch::Contains("train_batch_size: does not equal micro batch x accumulation x processes") &&
                                          Catch::Contains("4 x 2 x 1 = 8"));
  auto lamb = dir.write("l.json", R"({"optimizer": {"type": "Lamb"}, "zero_optimization": {"stage": 2}})");
  CHECK_THROWS_WITH(load_imported(lamb), Catch::Contains("optimizer.type: optimizer not supported by accel") &&
                                     Catch::Contains("AdamW | Adam | SGD"));
  auto tpu = dir.write("tpu.yaml", "compute_environment: LOCAL_MACHINE\ndistributed_type: XLA\n");
  CHECK_THROWS_WITH(load_imported(tpu), Catch::Contains("tpu.yaml:2:19: error: distributed_type: distributed type not supported"));
}
