// A third `backend:` dialect added from outside accel with one register_dialect line (docs/design/
// 0022, decision 2): "toy" shards optimizer states only and has no block of its own. Registered,
// `backend: toy` validates, its plan is deepspeed zero_stage 1's but for its name and label, and a
// world-2 run on the fake communicator is zero stage 1's bit for bit: the engine registry has no
// per-dialect code. A name no dialect has stays a positioned error (exit 2 in the executable).
#include "tests/support/catch_with_torch.hpp"

#include <limits>
#include <map>
#include <string>
#include <vector>

#include "runtime/comm/fake_communicator.hpp"
#include "runtime/common/errors.hpp"
#include "runtime/config/plan/resolve_plan.hpp"
#include "tests/comm/comm_test_support.hpp"
#include "tests/engine/tiny_job.hpp"
#include "tests/support/load_job_file.hpp"
#include "tests/support/prepared_builtin.hpp"
#include "tests/support/run_command.hpp"
#include "tests/support/temp_dir.hpp"

using namespace accel;

namespace {

// ZeRO stage 1 with fixed knobs: DeepSpeed's defaults, from a default deepspeed block rather than
// the job's (the toy reads no block). Stage 3's prefetch and persistence knobs act only when
// parameters are freed; the deepspeed dialect sets them at every stage, and so does this one, so
// the two plans compare equal field for field.
void resolve_toy(const plan::DialectInput&, plan::ResolvedPlan& plan) {
  const config::DeepSpeedSection knobs;
  plan.label = "toy: optimizer states sharded";
  plan.estimate_row = "zero-1";
  plan.shards = plan::Shards::optimizer;
  plan.reduce_bucket = plan::ReduceBucket::numel;
  plan.reduce_bucket_numel = knobs.reduce_bucket_size;
  plan.grouping = plan::Grouping::by_bucket;  // stage 1's reduce buckets
  plan.group_numel = knobs.reduce_bucket_size;
  plan.persistence_threshold = knobs.stage3_param_persistence_threshold;
  plan.prefetch.forward = true;
  plan.prefetch.backward = plan::PrefetchPolicy::Backward::pre;
  plan.prefetch.max_prefetch_units = std::numeric_limits<int>::max();
  plan.prefetch.max_prefetch_numel = knobs.stage3_prefetch_bucket_size;
  plan.prefetch.max_live_numel = knobs.stage3_max_live_parameters;
}

const bool toy_registered = (plan::register_dialect({"toy", resolve_toy}), true);

config::JobConfig zero1(config::JobConfig job) {
  job.backend = config::Backend::deepspeed;
  job.deepspeed.zero_stage = 1;
  return job;
}

config::JobConfig toy(config::JobConfig job) {
  job.backend = config::Backend{"toy"};
  return job;
}

}  // namespace

TEST_CASE("backend: toy validates once registered; a name no dialect has is a positioned error", "[toy_dialect]") {
  REQUIRE(toy_registered);
  CHECK(plan::dialect_names() == std::vector<std::string>{"ddp", "deepspeed", "fsdp", "toy"});
  test::TempDir dir;
  const config::LoadedJob loaded = test::load_unchecked(dir.write("toy.yaml", "backend: toy\nnum_processes: 2\n"));
  CHECK(loaded.job.backend == config::Backend{"toy"});
  CHECK(loaded.warnings.empty());
  CHECK_FALSE(loaded.translation.active);

  const std::string typo = dir.write("typo.yaml", "num_processes: 2\nbackend: tyo\n");
  try {
    test::load_unchecked(typo);
    FAIL("backend: tyo loaded");
  } catch (const ConfigError& e) {
    REQUIRE(e.diagnostics().size() == 1);
    const Diagnostic& d = e.diagnostics().front();
    CHECK(d.render() == typo + ":2:10: error: backend: unknown value\n"
                                "  value:   tyo\n"
                                "  allowed: ddp | deepspeed | fsdp | toy\n"
                                "  fix:     did you mean 'toy'?");
  }
  // The executable registers only accel's dialects: `toy` is a name no dialect has there.
  const auto r = test::run_command("env -u ACCEL_JOB " + test::shell_quote(ACCEL_BINARY) + " config validate " +
                                   test::shell_quote(dir.write("toy_elsewhere.yaml", "backend: toy\n")));
  INFO(r.output);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Catch::Contains("toy_elsewhere.yaml:1:10: error: backend: unknown value") &&
                           Catch::Contains("allowed: ddp | deepspeed | fsdp\n"));
}

TEST_CASE("the toy plan is deepspeed zero_stage 1's but for its dialect and label", "[toy_dialect]") {
  REQUIRE(toy_registered);
  config::JobConfig bf16;
  bf16.mixed_precision = config::MixedPrecision::bf16;
  const std::vector<std::pair<config::JobConfig, plan::ModelFacts>> jobs = {
      {config::JobConfig{}, plan::ModelFacts::builtin()},
      {bf16, plan::ModelFacts::builtin()},
      {config::JobConfig{}, plan::ModelFacts::user(false)},
  };
  for (const auto& [job, model] : jobs) {
    plan::ResolvedPlan want = plan::resolve_plan(zero1(job), model);
    const plan::ResolvedPlan got = plan::resolve_plan(toy(job), model);
    CHECK(got.dialect == "toy");
    CHECK(got.label == "toy: optimizer states sharded");
    want.dialect = got.dialect;
    want.label = got.label;
    CHECK(got == want);
  }
}

namespace {

at::Tensor tokens(int rows, int offset) {
  return (at::arange(int64_t(rows) * 8, at::kLong).view({rows, 8}) * 7 + offset) % 32;
}

// Three optimizer steps of the tiny GPT at world 2: every rank's losses and grad norms, rank 0's
// full parameters after the last step and the engine's memory report of its resident states (the
// transient peaks left out: they follow the threads' pace).
struct Run {
  std::vector<double> losses[2], norms[2];
  engine::NamedTensors full;
  nlohmann::json memory;
};

Run run_world2(const config::JobConfig& job) {
  comm::FakeWorld world(2);
  Run run;
  auto errors = test::run_ranks(
      2, [&](int r) { return world.communicator(r); },
      [&](comm::Communicator& comm) {
        const int r = comm.rank();
        test::PreparedBuiltin model(job, comm, test::builtin_module(job.model, 5));
        auto& engine = model.engine();
        for (int step = 0; step < 3; ++step) {
          auto* hooks = engine.begin_micro_step(0, true);
          at::Tensor loss = model.loss(model.forward(tokens(2, 2 * r + step), hooks), tokens(2, 2 * r + step + 1));
          loss.backward();
          engine.end_micro_step(true);
          run.losses[r].push_back(loss.item<double>());
          run.norms[r].push_back(engine.clip_grad_norm(1.0));
          engine.optimizer_step(1e-2);
        }
        engine::NamedTensors full = engine.full_parameters();  // collective
        // Both ranks finish their collectives before either leaves (the fake world's rule).
        comm.barrier()->wait();
        if (r != 0) return;
        run.full = std::move(full);
        run.memory = engine.memory_report();
        for (const char* peak : {"live_params_peak", "live_grads_peak"}) run.memory.erase(peak);
      });
  REQUIRE(errors == test::no_errors(2));
  return run;
}

}  // namespace

TEST_CASE("a world-2 run of the toy dialect is zero stage 1's bit for bit", "[toy_dialect]") {
  REQUIRE(toy_registered);
  const config::JobConfig job = test::tiny_job();
  const Run want = run_world2(zero1(job));
  const Run got = run_world2(toy(job));
  for (int r = 0; r < 2; ++r) {
    CHECK(got.losses[r] == want.losses[r]);
    CHECK(got.norms[r] == want.norms[r]);
  }
  CHECK(got.memory == want.memory);
  REQUIRE(got.full.size() == want.full.size());
  REQUIRE_FALSE(want.full.empty());
  for (size_t i = 0; i < want.full.size(); ++i) {
    INFO(want.full[i].first);
    CHECK(got.full[i].first == want.full[i].first);
    CHECK(at::equal(got.full[i].second, want.full[i].second));
  }
  CHECK(want.memory.value("optimizer_states", int64_t(0)) > 0);
  // The steps moved the parameters: equal because both runs trained alike, not because neither did.
  for (const auto& [name, initial] : test::builtin_module(job.model, 5)->spec_parameters())
    if (name == want.full.front().first) CHECK_FALSE(at::equal(initial, want.full.front().second));
}
