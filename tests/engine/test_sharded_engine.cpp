// The sharding engine's arithmetic and memory behaviour: flat layouts with padding, parameters that
// exist only as shards between uses (ZeRO-3), full gradients freed after reduction (ZeRO-2), and
// gradients kept as views of one flat buffer (ZeRO-1). Numerical agreement with the unsharded run
// is tested end to end (tests/numerics, ZeroStagesAgreement).
#include "tests/support/catch_with_torch.hpp"

#include <ATen/core/grad_mode.h>

#include "engine/sharded/flat_layout.hpp"
#include "engine/sharded/sharded_engine.hpp"
#include "engine/sharded/unit_grouping.hpp"
#include "runtime/comm/fake_communicator.hpp"
#include "tests/comm/comm_test_support.hpp"
#include "tests/engine/tiny_job.hpp"
#include "tests/support/prepared_builtin.hpp"

using accel::engine::FlatLayout;
using accel::engine::ShardedEngine;
using accel::engine::ShardingPolicy;
using accel::comm::Communicator;

TEST_CASE("flat layout: equal padded shards, segments cover every parameter element once", "[sharding]") {
  FlatLayout layout({4, 3, 3}, 4);  // N 10 over 4 ranks: S 3, P 12, 2 padding at the end
  CHECK(layout.numel() == 10);
  CHECK(layout.shard_numel() == 3);
  CHECK(layout.padded_numel() == 12);
  std::vector<int> covered(10, 0);
  for (int r = 0; r < 4; ++r)
    for (const auto& s : layout.segments(r)) {
      CHECK(s.shard_offset + s.numel <= 3);
      for (int64_t k = 0; k < s.numel; ++k) ++covered[size_t(layout.param_offset(s.param) + s.param_offset + k)];
    }
  CHECK(covered == std::vector<int>(10, 1));
  auto last = layout.segments(3);  // rank 3 owns element 9 and two padding elements
  REQUIRE(last.size() == 1);
  CHECK(last[0].param == 2);
  CHECK(last[0].param_offset == 2);
  CHECK(last[0].numel == 1);
  auto first = layout.segments(1);  // [3, 6): the end of parameter 0 and the start of parameter 1
  REQUIRE(first.size() == 2);
  CHECK(first[0].param == 0);
  CHECK(first[1].param == 1);
  CHECK(first[1].shard_offset == 1);
}

TEST_CASE("unit grouping: one per unit, whole model, and by size with the tail in the root", "[sharding][wrap]") {
  using accel::engine::UnitGroups;
  CHECK(accel::engine::one_group_per_unit(3) == UnitGroups{{0}, {1}, {2}});
  CHECK(accel::engine::one_group_for_all(3) == UnitGroups{{0, 1, 2}});
  // embedding 100, four layers of 50, final 2: at 100, layers pair up and the final joins the root.
  const std::vector<int64_t> numels{100, 50, 50, 50, 50, 2};
  CHECK(accel::engine::group_by_size(numels, 100) == UnitGroups{{0, 5}, {1, 2}, {3, 4}});
  CHECK(accel::engine::group_by_size(numels, 1) == UnitGroups{{0}, {1}, {2}, {3}, {4}, {5}});
  CHECK(accel::engine::group_by_size(numels, 150) == UnitGroups{{0, 4, 5}, {1, 2, 3}});
  CHECK(accel::engine::group_by_size(numels, 1000) == UnitGroups{{0, 1, 2, 3, 4, 5}});  // FSDP: all in the root
  CHECK(accel::engine::group_name({"h.0", "h.1"}) == "h.0+h.1");
}

TEST_CASE("unit grouping: ZeRO 1-2 buckets fill from the last unit backward", "[sharding][wrap]") {
  using accel::engine::UnitGroups;
  using accel::engine::group_by_bucket;
  const std::vector<int64_t> numels{100, 50, 50, 50, 50, 2};
  // From the end: final (2) + h.3 (50) = 52; + h.2 would be 102 > 100, so h.2 opens the next bucket.
  CHECK(group_by_bucket(numels, 100) == UnitGroups{{0}, {1}, {2, 3}, {4, 5}});
  CHECK(group_by_bucket(numels, 102) == UnitGroups{{0}, {1, 2}, {3, 4, 5}});
  CHECK(group_by_bucket(numels, 1000) == UnitGroups{{0, 1, 2, 3, 4, 5}});  // a small model: one bucket
  CHECK(group_by_bucket(numels, 1) == UnitGroups{{0}, {1}, {2}, {3}, {4}, {5}});  // each above: its own
  CHECK(group_by_bucket({}, 10).empty());
}

namespace {

using accel::test::builtin_module;
using accel::test::PreparedBuiltin;
using accel::test::tiny_job;

// A ShardedEngine under `policy` over the built-in model's units, as prepared for the trainer.
PreparedBuiltin::EngineFactory sharded_engine(Communicator& comm, const accel::config::JobConfig& job,
                                              const ShardingPolicy& policy) {
  return [&comm, &job, policy](std::vector<accel::engine::UnitSpec> specs) {
    return std::make_unique<ShardedEngine>(comm, std::move(specs), accel::engine::builtin_optimizer_setup(job.optimizer),
                                           policy);
  };
}

at::Tensor tokens(int rows, int offset) {
  return (at::arange(rows * 8, at::TensorOptions(at::kLong)) * 5 + offset).remainder(32).view({rows, 8});
}

struct Observed {
  bool params_released_at_rest = false;  // every parameter's storage empty outside a step, but the root's
  bool root_kept_at_rest = false;        // the root's parameters (pinned: never released) keep theirs
  bool grads_undefined_after_step = false;
  bool grads_are_flat_views = false;
  std::vector<at::Tensor> full;  // full_parameters() on rank 0
};

Observed run_engine(bool shard_grads, bool shard_params) {
  auto job = tiny_job();
  accel::comm::FakeWorld world(2);
  Observed seen[2];
  auto errors = accel::test::run_ranks(
      2, [&](int r) { return world.communicator(r); },
      [&](Communicator& comm) {
        int r = comm.rank();
        ShardingPolicy policy;
        policy.label = "test";
        policy.shard_grads = shard_grads;
        policy.shard_params = shard_params;
        PreparedBuiltin model(job, builtin_module(job.model, 9), sharded_engine(comm, job, policy));
        auto& engine = model.engine();
        auto params = model.parameters();
        // The root holds wte, wpe and ln_f: the forward reads them outside every unit boundary.
        auto in_root = [](const std::string& name) { return name.rfind("h.", 0) != 0; };
        auto all_released = [&] {
          for (auto& [n, p] : params)
            if (!in_root(n) && p.storage().nbytes() != 0) return false;
          return true;
        };
        auto root_kept = [&] {
          for (auto& [n, p] : params)
            if (in_root(n) && p.storage().nbytes() == 0) return false;
          return true;
        };
        bool released_before = all_released(), kept_before = root_kept();
        auto* hooks = engine.begin_micro_step(0, true);
        model.loss(model.forward(tokens(2, r), hooks), tokens(2, r + 1)).backward();
        engine.end_micro_step(true);
        Observed& o = seen[r];
        o.params_released_at_rest = released_before && all_released();
        o.root_kept_at_rest = kept_before && root_kept();
        o.grads_undefined_after_step = true;
        o.grads_are_flat_views = true;
        for (auto& [n, p] : params) {
          if (p.grad().defined()) o.grads_undefined_after_step = false;
          if (!p.grad().defined() || p.grad().storage().nbytes() <= size_t(p.numel()) * 4) o.grads_are_flat_views = false;
        }
        engine.clip_grad_norm(1.0);
        engine.optimizer_step(1e-3);
        for (auto& [n, t] : engine.full_parameters()) o.full.push_back(t);
      });
  CHECK(errors == std::vector<std::string>{"", ""});
  return seen[0];
}

}  // namespace

TEST_CASE("zero-3: parameters are released between uses; zero-2 frees full gradients; zero-1 keeps flat views",
          "[sharding]") {
  Observed z1 = run_engine(false, false), z2 = run_engine(true, false), z3 = run_engine(true, true);
  CHECK(z3.params_released_at_rest);
  CHECK(z3.root_kept_at_rest);
  CHECK_FALSE(z2.params_released_at_rest);
  CHECK(z3.grads_undefined_after_step);
  CHECK(z2.grads_undefined_after_step);
  CHECK_FALSE(z1.grads_undefined_after_step);
  CHECK(z1.grads_are_flat_views);  // one unit-wide buffer behind every gradient
  // All three apply the same update: the gathered parameters agree to fp32 rounding.
  REQUIRE(z1.full.size() == z3.full.size());
  for (size_t i = 0; i < z1.full.size(); ++i) {
    CHECK(at::allclose(z1.full[i], z2.full[i], 1e-6, 1e-7));
    CHECK(at::allclose(z1.full[i], z3.full[i], 1e-6, 1e-7));
  }
}

namespace {

// Two optimizer steps at world 4 as FULL_SHARD (shard_group_size 0) or HYBRID_SHARD (groups of 2:
// two "machines"), each rank on its own rows. Records rank 0's full parameters, every rank's grad
// norms, every rank's loss on one common batch after training (equal iff every rank computes with
// the same parameters, replicas included), and every rank's describe() line.
struct WorldRun {
  std::vector<at::Tensor> full;
  std::vector<std::vector<double>> norms{4};
  std::vector<double> common_loss{0, 0, 0, 0};
  std::vector<std::string> described{4};
};

WorldRun run_world4(int shard_group_size) {
  auto job = tiny_job();
  accel::comm::FakeWorld world(4);
  WorldRun out;
  auto errors = accel::test::run_ranks(
      4, [&](int r) { return world.communicator(r); },
      [&](Communicator& comm) {
        int r = comm.rank();
        ShardingPolicy policy;
        policy.label = "test";
        policy.shard_params = true;
        policy.shard_group_size = shard_group_size;
        PreparedBuiltin model(job, builtin_module(job.model, 9), sharded_engine(comm, job, policy));
        auto& engine = model.engine();
        for (int step = 0; step < 2; ++step) {
          auto* hooks = engine.begin_micro_step(0, true);
          model.loss(model.forward(tokens(2, r + step), hooks), tokens(2, r + step + 1)).backward();
          engine.end_micro_step(true);
          out.norms[size_t(r)].push_back(engine.clip_grad_norm(1.0));
          engine.optimizer_step(1e-2);
        }
        {
          at::NoGradGuard no_grad;
          out.common_loss[size_t(r)] = model.loss(model.forward(tokens(2, 7), engine.eval_hooks()), tokens(2, 8)).item<double>();
        }
        auto full = engine.full_parameters();
        if (r == 0)
          for (auto& [n, t] : full) out.full.push_back(t);
        out.described[size_t(r)] = engine.describe();
      });
  CHECK(errors == std::vector<std::string>(4, ""));
  return out;
}

}  // namespace

TEST_CASE("HYBRID_SHARD (2 machines x 2 ranks) matches FULL_SHARD over the 4 ranks", "[sharding][hybrid]") {
  WorldRun full = run_world4(0), hybrid = run_world4(2);
  // Same averaged gradients (machine average, then across machines) and the same AdamW step: only
  // fp32 reassociation differs. Adam divides by sqrt(v), so a rounding difference in a near-zero
  // gradient element moves that weight by up to ~lr x its relative size: measured max 2.2e-6 after
  // 2 steps at lr 1e-2. 1e-5 absolute keeps a 4x margin; a wrong average (a missing or doubled
  // cross-machine reduction) moves weights by O(lr) = 1e-2.
  REQUIRE(hybrid.full.size() == full.full.size());
  REQUIRE_FALSE(full.full.empty());
  for (size_t i = 0; i < full.full.size(); ++i) {
    CAPTURE(i, (hybrid.full[i] - full.full[i]).abs().max().item<double>());
    CHECK(at::allclose(hybrid.full[i], full.full[i], 0.0, 1e-5));
  }
  for (int r = 0; r < 4; ++r) {
    CAPTURE(r);
    for (size_t s = 0; s < 2; ++s) CHECK(hybrid.norms[size_t(r)][s] == Approx(full.norms[0][s]).epsilon(1e-6));
    // Both machines' copies were updated alike: the same loss on the same batch, exactly.
    CHECK(hybrid.common_loss[size_t(r)] == hybrid.common_loss[0]);
    CHECK(hybrid.common_loss[size_t(r)] == Approx(full.common_loss[0]).epsilon(1e-6));
    // The states are split over one machine's ranks, not the world.
    CHECK_THAT(full.described[size_t(r)], Catch::Contains("in 4 shards"));
    CHECK_THAT(hybrid.described[size_t(r)], Catch::Contains("in 2 shards") && Catch::Contains("replicated on 2 machines"));
  }
}

ACCEL_ASSERT_CHECK_IS_CATCH();
