// Gradient accumulation under mixed_precision bf16 and fp16, through the built-in trainer in process
// (FakeWorld threads). Under bf16/fp16 even ddp, zero 0 and NO_SHARD run on the sharding engine, in
// its replicated layout: each unit's gradients accumulate over the micro-steps in one low-precision
// buffer, which is reduced once, on the last micro-step (no-sync before it), and added into the
// fp32 gradient. Reducing it on every micro-step as well would add the first micro-steps' gradients
// again. So, for ddp, zero 0-3 and the FSDP strategies, at both precisions:
//  - micro 2 rows x accumulation 2 gives the step of micro 4 x accumulation 1 (the same global batch,
//    dataset.hpp): the same grad norm and loss within the low precision's rounding;
//  - the schedule (the engine's --trace): each unit's gradients are reduced exactly once per
//    optimizer step where the strategy keeps whole gradients (ddp, zero 0-1, NO_SHARD), and once per
//    micro-step where it shards them (zero 2-3, SHARD_GRAD_OP, FULL_SHARD, HYBRID_SHARD).
#include "tests/support/catch_with_torch.hpp"

#include <cmath>
#include <map>
#include <set>
#include <utility>

#include "tests/train/trainer/in_process_trainer.hpp"

using namespace accel;
using config::Backend;
using config::MixedPrecision;
using config::ShardingStrategy;

namespace {

struct Strategy {
  std::string name;
  Backend backend;
  int zero_stage = 0;
  ShardingStrategy fsdp = ShardingStrategy::FULL_SHARD;
  bool keeps_whole_gradients = false;  // no-sync: one reduction per unit per optimizer step
  int world = 2;
  int machines = 1;
};

const std::vector<Strategy>& strategies() {
  static const std::vector<Strategy> all = {
      {"ddp", Backend::ddp, 0, ShardingStrategy::FULL_SHARD, true},
      {"zero 0", Backend::deepspeed, 0, ShardingStrategy::FULL_SHARD, true},
      {"zero 1", Backend::deepspeed, 1, ShardingStrategy::FULL_SHARD, true},
      {"zero 2", Backend::deepspeed, 2, ShardingStrategy::FULL_SHARD, false},
      {"zero 3", Backend::deepspeed, 3, ShardingStrategy::FULL_SHARD, false},
      {"NO_SHARD", Backend::fsdp, 0, ShardingStrategy::NO_SHARD, true},
      {"SHARD_GRAD_OP", Backend::fsdp, 0, ShardingStrategy::SHARD_GRAD_OP, false},
      {"FULL_SHARD", Backend::fsdp, 0, ShardingStrategy::FULL_SHARD, false},
      {"HYBRID_SHARD 2x2", Backend::fsdp, 0, ShardingStrategy::HYBRID_SHARD, false, 4, 2},
  };
  return all;
}

config::JobConfig job_for(const Strategy& s, MixedPrecision precision, int micro, int accumulation) {
  config::JobConfig job = test::tiny_trainer_job(2, micro, accumulation);
  job.backend = s.backend;
  job.deepspeed.zero_stage = s.zero_stage;
  job.fsdp.sharding_strategy = s.fsdp;
  job.num_machines = s.machines;
  job.mixed_precision = precision;
  return job;
}

// (step, unit) -> reduce_issued events in one rank's trace.
std::map<std::pair<int64_t, std::string>, int> reductions(const nlohmann::json& events) {
  std::map<std::pair<int64_t, std::string>, int> count;
  for (const auto& e : events) {
    if (!e.contains("args") || e["args"].value("event", "") != "reduce_issued") continue;
    ++count[{e["args"]["step"].get<int64_t>(), e["args"]["unit"].get<std::string>()}];
  }
  return count;
}

double relative_difference(double a, double b) { return std::abs(a - b) / std::abs(b); }

}  // namespace

TEST_CASE("bf16 and fp16: accumulation 2 gives the step of accumulation 1, one reduction per unit per step",
          "[trainer][mixed_precision][accumulation]") {
  for (MixedPrecision precision : {MixedPrecision::bf16, MixedPrecision::fp16}) {
    for (const Strategy& s : strategies()) {
      CAPTURE(config::to_string(precision), s.name);
      const auto whole = test::run_trainer_in_process(job_for(s, precision, 4, 1), s.world);
      const auto split = test::run_trainer_in_process(job_for(s, precision, 2, 2), s.world, /*trace=*/true);
      REQUIRE(whole.errors == std::vector<std::string>(size_t(s.world), ""));
      REQUIRE(split.errors == std::vector<std::string>(size_t(s.world), ""));
      REQUIRE(whole.steps.size() == 2);
      REQUIRE(split.steps.size() == 2);
      const double norm_whole = whole.steps[0]["grad_norm"], norm_split = split.steps[0]["grad_norm"];
      const double loss_whole = whole.steps[0]["loss"], loss_split = split.steps[0]["loss"];
      CAPTURE(norm_whole, norm_split, loss_whole, loss_split);
      REQUIRE(std::isfinite(norm_whole));
      // The two runs compute each token's forward and backward alike (the 1/N of the mean and the
      // 1/G are powers of two) and differ in where the low-precision gradient sums round: the
      // accumulated run rounds each micro-step's sum over its tokens, then their sum in the
      // buffer (or, sharding gradients, reduces each micro-step's sum in low precision), where the
      // other rounds the one sum over all tokens: at most 4 more roundings per element, each
      // within u of the magnitudes summed (u = 2^-8 for bf16, 2^-11 for fp16), and a factor 2 for
      // the micro-steps' terms cancelling: 8u relative in the norm (3.1% bf16, 0.39% fp16). A
      // kernel that rounds a token's value to the neighbouring number on some CPU adds O(u) more.
      // Measured: 1.2e-4 to 1.7e-4 (bf16), 3.1e-5 to 5.5e-5 (fp16). Reducing on every micro-step
      // adds the first micro-step's gradient twice: the norm grows by tens of percent.
      const double u = precision == MixedPrecision::bf16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
      const double bound = 8 * u;
      CHECK(relative_difference(norm_split, norm_whole) <= bound);
      CHECK(relative_difference(loss_split, loss_whole) <= bound);  // the forward's alone; measured 3e-8
      // The schedule, on every rank: each unit reduced once per step, or once per micro-step.
      const int expected = s.keeps_whole_gradients ? 1 : 2;
      for (int r = 0; r < s.world; ++r) {
        CAPTURE(r);
        const auto count = reductions(split.traces[size_t(r)]);
        std::set<int64_t> steps;
        std::set<std::string> units;
        for (const auto& [key, n] : count) {
          steps.insert(key.first);
          units.insert(key.second);
          CAPTURE(key.first, key.second);
          CHECK(n == expected);
        }
        CHECK(steps == std::set<int64_t>{1, 2});  // the trace counts steps from 1
        CHECK(count.size() == 2 * units.size());  // every unit in both steps
        CHECK_FALSE(units.empty());
      }
    }
  }
}

ACCEL_ASSERT_CHECK_IS_CATCH();
