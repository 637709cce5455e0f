// The memory estimate's step replay (runtime/estimate/step_replay.hpp) against the engine it
// replays: the built-in GPT trained for two steps on a world of two in-process ranks, under each
// schedule the plans make (DeepSpeed's prefetch and its bounds, gathering on demand, the reduce
// bucket, FSDP's one unit ahead with and without limit_all_gathers, BACKWARD_POST, stage 2, bf16).
// The engine's own memory report (rank 0) must equal the estimate's configured row component for
// component: kept parameters, gathered and gradient-buffer peaks, master, gradient, state and
// compute-dtype parameter shards.
// A replay that drifts from the engine's schedule fails here.
#include "tests/support/catch_with_torch.hpp"

#include "runtime/estimate/job_estimate.hpp"
#include "tests/engine/tiny_job.hpp"
#include "tests/engine/two_step_world.hpp"

using namespace accel;

namespace {

void check_replay_matches_engine(const config::JobConfig& job) {
  estimate::JobEstimateOptions options;
  options.world = 2;
  const estimate::JobEstimate e = estimate::estimate_job(job, options);
  const estimate::MemoryEstimate& row = e.strategies[size_t(e.configured)];
  nlohmann::json seen;
  test::train_two_steps_on_two_ranks(job, [&](engine::Backend& engine, test::PreparedBuiltin&) { seen = engine.memory_report(); });
  INFO(e.configured_label << "; engine: " << seen.dump());
  CHECK(seen.value("live_params_peak", int64_t(-1)) == row.live_params);
  CHECK(seen.value("live_grads_peak", int64_t(-1)) == row.live_grads);
  CHECK(seen.value("params", int64_t(-1)) == row.params);
  CHECK(seen.value("master", int64_t(-1)) == row.master);
  CHECK(seen.value("grad_shard", int64_t(-1)) == row.grad_shard);
  CHECK(seen.value("optimizer_states", int64_t(-1)) == row.optimizer_states);
  // The compute-dtype shards held apart (bf16 here): stage 3's partitioned units' only (a kept unit
  // gathers from its slice of params), every unit's at stages 1-2.
  CHECK(seen.value("param_shards", int64_t(-1)) == row.param_shard);
}

}  // namespace

TEST_CASE("the step replay gathers and reduces as the engine does under DeepSpeed's knobs", "[replay]") {
  config::JobConfig job = test::tiny_job(config::Backend::deepspeed);
  job.num_processes = 2;
  job.model.n_layer = 6;
  job.deepspeed.zero_stage = 3;
  job.deepspeed.stage3_param_persistence_threshold = 0;
  const int64_t block = 12 * 16 * 16 + 13 * 16;
  SECTION("defaults: the window grows to the whole model") { check_replay_matches_engine(job); }
  SECTION("a prefetch bucket of two blocks: the window grows past it") {
    job.deepspeed.stage3_prefetch_bucket_size = 2 * block;
    check_replay_matches_engine(job);
  }
  SECTION("and a live bound of three blocks stops it") {
    job.deepspeed.stage3_prefetch_bucket_size = 2 * block;
    job.deepspeed.stage3_max_live_parameters = 3 * block;
    check_replay_matches_engine(job);
  }
  SECTION("no prefetch, a reduce bucket of one block") {
    job.deepspeed.stage3_prefetch_bucket_size = 0;
    job.deepspeed.reduce_bucket_size = block;
    check_replay_matches_engine(job);
  }
  SECTION("bf16 compute") {
    job.mixed_precision = config::MixedPrecision::bf16;
    job.deepspeed.reduce_bucket_size = 3 * block;
    check_replay_matches_engine(job);
  }
  SECTION("bf16 compute, every layer persistent: no unit keeps a shard beside its parameters") {
    job.mixed_precision = config::MixedPrecision::bf16;
    job.deepspeed.stage3_param_persistence_threshold = block + 1;
    check_replay_matches_engine(job);
  }
  SECTION("bf16 compute at stage 2: every unit keeps a bf16 shard beside its parameters") {
    job.mixed_precision = config::MixedPrecision::bf16;
    job.deepspeed.zero_stage = 2;
    check_replay_matches_engine(job);
  }
  SECTION("stage 2 with a reduce bucket of two blocks") {
    job.deepspeed.zero_stage = 2;
    job.deepspeed.reduce_bucket_size = 2 * block;
    check_replay_matches_engine(job);
  }
}

TEST_CASE("the step replay gathers and reduces as the engine does under FSDP's knobs", "[replay]") {
  config::JobConfig job = test::tiny_job(config::Backend::fsdp);
  job.num_processes = 2;
  job.model.n_layer = 5;
  job.fsdp.sharding_strategy = config::ShardingStrategy::FULL_SHARD;
  SECTION("BACKWARD_PRE, forward prefetch, limit_all_gathers") {
    job.fsdp.forward_prefetch = true;
    check_replay_matches_engine(job);
  }
  SECTION("no limit") {
    job.fsdp.forward_prefetch = true;
    job.fsdp.limit_all_gathers = false;
    check_replay_matches_engine(job);
  }
  SECTION("BACKWARD_POST") {
    job.fsdp.backward_prefetch = config::BackwardPrefetch::BACKWARD_POST;
    check_replay_matches_engine(job);
  }
  SECTION("SHARD_GRAD_OP") {
    job.fsdp.sharding_strategy = config::ShardingStrategy::SHARD_GRAD_OP;
    check_replay_matches_engine(job);
  }
}
