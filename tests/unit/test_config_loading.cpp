// Loading a job: precedence of the layers, where each value came from, value parsing, aliases,
// path resolution, error collection, and dump round trips.
#include <catch2/catch.hpp>

#include <filesystem>

#include "runtime/config/dump.hpp"
#include "runtime/config/job_loader.hpp"
#include "support/temp_dir.hpp"
#include "unit/load_job_test_support.hpp"

using namespace accel;
using namespace accel::config;
namespace fs = std::filesystem;
using accel::test::TempDir;

namespace {

using accel::test::error_text;
using accel::test::load;

}  // namespace

TEST_CASE("precedence: defaults < file < environment < command line") {
  TempDir dir;
  auto file = dir.write("job.yaml", "training:\n  max_steps: 10\n  seq_len: 64\n  seed: 7\n");

  auto only_file = load(file);
  CHECK(only_file.job.training.max_steps == 10);
  CHECK(only_file.job.training.micro_batch_size == 8);  // default
  CHECK(only_file.sources.at("training.max_steps").str() == file + ":2:14");
  CHECK(only_file.sources.at("training.micro_batch_size").str() == "default");

  auto with_env = load(file, {}, {{"ACCEL_TRAINING_MAX_STEPS", "20"}, {"ACCEL_TRAINING_SEQ_LEN", "32"}});
  CHECK(with_env.job.training.max_steps == 20);
  CHECK(with_env.sources.at("training.max_steps").str() == "environment ACCEL_TRAINING_MAX_STEPS");

  auto with_cli = load(file, {"training.max_steps=30"}, {{"ACCEL_TRAINING_MAX_STEPS", "20"}});
  CHECK(with_cli.job.training.max_steps == 30);
  CHECK(with_cli.sources.at("training.max_steps").str() == "--set training.max_steps=30");
  CHECK(with_cli.job.training.seed == 7);
}

TEST_CASE("values: numbers in e-notation, bare `no`, case-insensitive enums, flow lists") {
  TempDir dir;
  auto file = dir.write("job.yaml",
                        "mixed_precision: no\n"
                        "backend: deepspeed\n"
                        "deepspeed:\n  reduce_bucket_size: 5e8\n  overlap_comm: off\n"
                        "fsdp:\n  sharding_strategy: shard_grad_op\n"
                        "optimizer:\n  betas: [0.8, 0.99]\n  lr: 1e-3\n");
  auto j = load(file).job;
  CHECK(j.mixed_precision == MixedPrecision::no);
  CHECK(j.deepspeed.reduce_bucket_size == 500000000);
  CHECK_FALSE(j.deepspeed.overlap_comm);
  CHECK(j.fsdp.sharding_strategy == ShardingStrategy::SHARD_GRAD_OP);
  CHECK(j.optimizer.betas == std::vector<double>{0.8, 0.99});
  CHECK(j.optimizer.lr == Approx(1e-3));
  CHECK(load(file, {"optimizer.betas=[0.9, 0.999]"}).job.optimizer.betas[1] == Approx(0.999));
}

TEST_CASE("an integer key rejects a fraction; a string key takes any scalar") {
  TempDir dir;
  auto file = dir.write("job.yaml", "training:\n  micro_batch_size: 2.5\n");
  CHECK_THAT(error_text([&] { load(file); }), Catch::Contains("training.micro_batch_size: expected an integer"));
  auto ok = dir.write("ok.yaml", "main_process_ip: 10.0.0.1\n");
  CHECK(load(ok).job.main_process_ip == "10.0.0.1");
}

TEST_CASE("every problem of a pass is reported together") {
  TempDir dir;
  auto file = dir.write("job.yaml", "backnd: ddp\ntraining:\n  max_steps: -1\n  sed: 3\n");
  auto text = error_text([&] { load(file); });
  CHECK_THAT(text, Catch::Contains("job.yaml:1:1: error: backnd: unknown key"));
  CHECK_THAT(text, Catch::Contains("job.yaml:3:14: error: training.max_steps: value out of range"));
  CHECK_THAT(text, Catch::Contains("job.yaml:4:3: error: training.sed: unknown key"));
  CHECK_THAT(text, Catch::Contains("did you mean 'seed'?"));
}

TEST_CASE("unknown override keys and ACCEL_ variables are errors with suggestions") {
  CHECK_THAT(error_text([] { load("", {"training.max_step=3"}); }),
             Catch::Contains("--set training.max_step=3: error: training.max_step: unknown key") &&
                 Catch::Contains("did you mean 'training.max_steps'?"));
  CHECK_THAT(error_text([] { load("", {"nonsense"}); }), Catch::Contains("expected key.path=value"));
  CHECK_THAT(error_text([] { load("", {}, {{"ACCEL_TRAINING_MAX_STEP", "3"}}); }),
             Catch::Contains("environment ACCEL_TRAINING_MAX_STEP: error: unknown ACCEL_ environment variable") &&
                 Catch::Contains("did you mean ACCEL_TRAINING_MAX_STEPS?"));
  CHECK_NOTHROW(load("", {}, {{"ACCEL_JOB", "/x.yaml"}, {"ACCEL_LOG_LEVEL", "debug"}}));
  CHECK_THAT(error_text([] { load("", {}, {{"ACCEL_DEEPSPEED_ZERO_STAGE", "five"}}); }),
             Catch::Contains("environment ACCEL_DEEPSPEED_ZERO_STAGE: error: deepspeed.zero_stage: expected an integer"));
}

TEST_CASE("DeepSpeed aliases write the training keys; agreeing duplicates are fine") {
  TempDir dir;
  auto file = dir.write("job.yaml", "deepspeed:\n  gradient_clipping: 0.5\n  gradient_accumulation_steps: 4\n"
                                    "training:\n  gradient_accumulation_steps: 4\n");
  auto loaded = load(file);
  CHECK(loaded.job.training.max_grad_norm == Approx(0.5));
  CHECK(loaded.job.training.gradient_accumulation_steps == 4);
  CHECK(loaded.sources.at("training.max_grad_norm").str() == file + ":2:22 (as deepspeed.gradient_clipping)");
  // An override of the alias beats the file, like any override.
  CHECK(load(file, {"deepspeed.gradient_clipping=2"}).job.training.max_grad_norm == Approx(2.0));
}

TEST_CASE("input paths resolve against the job file; output paths against the working directory") {
  TempDir dir;
  dir.write("data/tiny.txt", "hello world\n");
  auto file = dir.write("jobs/job.yaml", "data:\n  kind: text\n  path: ../data/tiny.txt\n"
                                         "training:\n  output_dir: runs/x\n");
  auto j = load(file).job;
  CHECK(j.data.path == (dir.path() / "data/tiny.txt").string());
  CHECK(j.training.output_dir == "runs/x");
  // From --set, a relative input path is taken as written (relative to the working directory).
  CHECK_THAT(error_text([&] { load(file, {"data.path=tiny.txt"}); }), Catch::Contains("data.path: file does not exist"));
}

TEST_CASE("a job file's program follows the same rule: a relative path is the job file's neighbour") {
  // examples/minimal/job.yaml used to work only from build/ (program paths were taken against the
  // working directory while data.path was taken against the job file).
  TempDir dir;
  const std::string trainer = dir.write("jobs/bin/trainer", "#!/bin/sh\n");
  fs::permissions(trainer, fs::perms::owner_all);
  auto file = dir.write("jobs/job.yaml", "program: [./bin/trainer, --data, ./rows.bin]\n");
  auto j = load(file).job;
  CHECK(j.program == std::vector<std::string>{trainer, "--data", "./rows.bin"});  // arguments are the program's own
  CHECK(load(dir.write("jobs/bare.yaml", "program: [sh, -c, true]\n")).job.program.front() == "sh");  // on PATH
  // On the command line, as written (the working directory's): ./t is no program there.
  CHECK_THAT(error_text([&] { load(file, {"program=[./t]"}); }), Catch::Contains("value:   [./t]"));
}

TEST_CASE("cross-field checks point at the key at fault and at the other key") {
  TempDir dir;
  auto file = dir.write("job.yaml", "backend: deepspeed\ndeepspeed:\n  zero_stage: 1\n  offload_param_device: nvme\n");
  auto text = error_text([&] { load(file); });
  CHECK_THAT(text, Catch::Contains("job.yaml:4:25: error: deepspeed.offload_param_device: parameter offload needs ZeRO stage 3"));
  CHECK_THAT(text, Catch::Contains("deepspeed.zero_stage is 1 (set at " + file + ":3:15)"));
  CHECK_THAT(text, Catch::Contains("nvme offload needs a directory"));
  // Overrides are validated too, with their own location.
  CHECK_THAT(error_text([] { load("", {"model.n_head=3"}); }),
             Catch::Contains("default: error: model.n_embd: must be divisible by model.n_head") &&
                 Catch::Contains("model.n_head is 3 (set at --set model.n_head=3)"));
}

TEST_CASE("warnings name keys that have no effect") {
  TempDir dir;
  auto file = dir.write("job.yaml", "backend: deepspeed\ndeepspeed:\n  hysteresis: 4\ndata:\n  path: x.bin\n");
  auto loaded = load(file);
  REQUIRE(loaded.warnings.size() == 2);
  CHECK_THAT(loaded.warnings[0].render("warning"),
             Catch::Contains("job.yaml:3:15: warning: deepspeed.hysteresis: has no effect: loss scaling applies to fp16 only"));
  CHECK_THAT(loaded.warnings[1].render("warning"), Catch::Contains("data.path: has no effect with data.kind synthetic"));
}

TEST_CASE("an empty job file is all defaults; a non-mapping is an error") {
  TempDir dir;
  auto empty = load(dir.write("empty.yaml", ""));
  CHECK(empty.job.backend == Backend::ddp);
  CHECK_THAT(error_text([&] { load(dir.write("list.yaml", "- a\n- b\n")); }),
             Catch::Contains("list.yaml:1:1: error: a job file must be a mapping"));
  CHECK_THAT(error_text([&] { load((dir.path() / "missing.yaml").string()); }),
             Catch::Contains("missing.yaml: error: cannot read the job file"));
}

TEST_CASE("dumps read back to the same job, in every style") {
  TempDir dir;
  auto file = dir.write("job.yaml", "backend: fsdp\nmixed_precision: bf16\nfsdp:\n  sharding_strategy: HYBRID_SHARD\n"
                                    "optimizer:\n  lr: 0.0006\n  betas: [0.9, 0.999]\ntraining:\n  output_dir: out dir/x\n");
  auto original = load(file);
  for (auto style : {DumpStyle::Full, DumpStyle::ExplicitOnly, DumpStyle::WithSources}) {
    auto text = dump_job(original.job, original.sources, style);
    auto again = load(dir.write("again.yaml", text));
    CHECK(dump_job(again.job, again.sources, DumpStyle::Full) == dump_job(original.job, original.sources, DumpStyle::Full));
  }
  auto with_sources = dump_job(original.job, original.sources, DumpStyle::WithSources);
  CHECK_THAT(with_sources, Catch::Contains("backend: fsdp") && Catch::Contains("# " + file + ":1:10"));
  CHECK_THAT(with_sources, Catch::Contains("mixed_precision: bf16"));
  CHECK_THAT(dump_job(original.job, original.sources, DumpStyle::Full), Catch::Contains("mixed_precision: bf16"));
  auto explicit_only = dump_job(original.job, original.sources, DumpStyle::ExplicitOnly);
  CHECK_THAT(explicit_only, !Catch::Contains("num_processes"));
}
