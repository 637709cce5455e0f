// Activation checkpointing over the sharding engines (docs/design/0010), on in-process worlds of 2:
//  - under FULL_SHARD a recomputed unit's parameters are freed after its forward and gathered again
//    by the engine's pre-backward signal before the recompute reads them;
//  - fsdp FULL_SHARD, SHARD_GRAD_OP and NO_SHARD (the ddp engine) give the same grad norms and
//    parameters bit for bit with fsdp.activation_checkpointing on and off, with accumulation.
// The same through the launcher: tests/numerics/test_activation_checkpointing.py.
#include "tests/support/catch_with_torch.hpp"

#include <torch/csrc/autograd/custom_function.h>

#include <string>
#include <vector>

#include "engine/sharded/sharded_engine.hpp"
#include "runtime/comm/fake_communicator.hpp"
#include "tests/comm/comm_test_support.hpp"
#include "tests/engine/tiny_job.hpp"
#include "tests/support/prepared_builtin.hpp"

using accel::test::builtin_module;
using accel::test::PreparedBuiltin;
using accel::engine::UnitHooks;

namespace {

accel::config::JobConfig tiny_fsdp_job() { return accel::test::tiny_job(accel::config::Backend::fsdp); }

at::Tensor recompute_tokens(int rank, int micro_step) {
  return (at::arange(16, at::TensorOptions(at::kLong)) * 3 + rank + 5 * micro_step).remainder(32).view({2, 8});
}

// Whether every parameter of a unit has its gathered storage (ZeRO-3 frees it to 0 bytes).
bool gathered(torch::nn::Module& unit) {
  for (const auto& p : unit.parameters())
    if (p.storage().nbytes() == 0) return false;
  return true;
}

struct Event {
  std::string label;  // "<where> <unit>"
  bool gathered;
};

// An identity whose backward records whether its unit is gathered at that moment.
struct StorageProbe : torch::autograd::Function<StorageProbe> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, at::Tensor x, std::string label, int64_t unit,
                            int64_t events) {
    ctx->saved_data["label"] = label;
    ctx->saved_data["unit"] = unit;
    ctx->saved_data["events"] = events;
    return x;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto* unit = reinterpret_cast<torch::nn::Module*>(ctx->saved_data["unit"].toInt());
    auto* events = reinterpret_cast<std::vector<Event>*>(ctx->saved_data["events"].toInt());
    events->push_back({ctx->saved_data["label"].toStringRef(), gathered(*unit)});
    return {grads[0], at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// The engine's hooks with a probe on each side of its post_forward signal: in backward, "before
// gather" runs just before the engine's pre-backward gather, "before recompute" just after it,
// immediately before the unit's recomputed forward. Every wrapper (the layer units) recomputes;
// the root has no boundary.
struct ProbedHooks : UnitHooks {
  UnitHooks* engine = nullptr;
  const PreparedBuiltin* model = nullptr;
  std::vector<Event> events;
  at::Tensor probe(torch::nn::Module& unit, at::Tensor t, const std::string& where) {
    return StorageProbe::apply(t, where + " " + model->unit_name(unit), reinterpret_cast<int64_t>(&unit),
                               reinterpret_cast<int64_t>(&events));
  }
  at::Tensor pre_forward(torch::nn::Module& unit, at::Tensor x) override { return engine->pre_forward(unit, x); }
  at::Tensor post_forward(torch::nn::Module& unit, at::Tensor y) override {
    return probe(unit, engine->post_forward(unit, probe(unit, y, "before recompute")), "before gather");
  }
};

}  // namespace

TEST_CASE("FULL_SHARD: a recomputed unit is released after its forward and gathered before its recompute",
          "[fsdp][checkpoint]") {
  auto job = tiny_fsdp_job();
  job.fsdp.activation_checkpointing = true;
  accel::comm::FakeWorld world(2);
  std::vector<Event> seen[2];
  auto errors = accel::test::run_ranks(
      2, [&](int r) { return world.communicator(r); },
      [&](accel::comm::Communicator& comm) {
        accel::engine::ShardingPolicy policy;
        policy.label = "test FULL_SHARD";
        policy.shard_grads = policy.shard_params = true;
        policy.prefetch.forward = false;  // no prefetch: a unit is gathered only on demand
        policy.prefetch.backward = accel::engine::PrefetchPolicy::Backward::none;
        PreparedBuiltin model(job, builtin_module(job.model, 9), [&](std::vector<accel::engine::UnitSpec> specs) {
          return std::make_unique<accel::engine::ShardedEngine>(
              comm, std::move(specs), accel::engine::builtin_optimizer_setup(job.optimizer), policy);
        });
        if (!model.recomputes()) throw std::runtime_error("the wrappers do not recompute");
        auto& engine = model.engine();
        ProbedHooks hooks;
        hooks.model = &model;
        hooks.engine = engine.begin_micro_step(0, true);
        at::Tensor idx = recompute_tokens(comm.rank(), 0);
        model.loss(model.forward(idx, &hooks), idx).backward();
        engine.end_micro_step(true);
        seen[comm.rank()] = hooks.events;
      });
  REQUIRE(errors == std::vector<std::string>{"", ""});
  for (const auto& events : seen) {
    std::vector<std::string> labels;
    for (const auto& e : events) {
      labels.push_back(e.label);
      INFO(e.label);
      // Freed before the pre-backward gather (recomputing then would read no storage), gathered after.
      CHECK(e.gathered == (e.label.rfind("before recompute", 0) == 0));
    }
    CHECK(labels == std::vector<std::string>{"before gather h.1", "before recompute h.1", "before gather h.0",
                                             "before recompute h.0"});
  }
}

namespace {

struct RecomputeRun {
  std::vector<double> grad_norms;
  std::vector<at::Tensor> params;  // full parameters after the last step (rank 0)
};

// Two optimizer steps of two micro-steps each on the job's engine (the fsdp plan, then make_backend).
RecomputeRun train_recomputed(accel::config::JobConfig job) {
  accel::comm::FakeWorld world(2);
  RecomputeRun runs[2];
  auto errors = accel::test::run_ranks(
      2, [&](int r) { return world.communicator(r); },
      [&](accel::comm::Communicator& comm) {
        PreparedBuiltin model(job, comm, builtin_module(job.model, 9));
        auto* backend = &model.engine();
        if (model.recomputes() != job.fsdp.activation_checkpointing)
          throw std::runtime_error("the fsdp plan did not set the wrappers' activation checkpointing");
        RecomputeRun& run = runs[comm.rank()];
        for (int step = 0; step < 2; ++step) {
          for (int m = 0; m < 2; ++m) {
            auto* hooks = backend->begin_micro_step(m, m == 1);
            at::Tensor idx = recompute_tokens(comm.rank(), 2 * step + m);
            (model.loss(model.forward(idx, hooks), idx.roll(1, 1)) / 2.0).backward();
            backend->end_micro_step(m == 1);
          }
          run.grad_norms.push_back(backend->clip_grad_norm(1.0));
          backend->optimizer_step(1e-2);
        }
        for (auto& [name, t] : backend->full_parameters()) run.params.push_back(t);
      });
  REQUIRE(errors == std::vector<std::string>{"", ""});
  return runs[0];
}

}  // namespace

TEST_CASE("fsdp strategies at world 2 with accumulation: the same numbers bit for bit with activation checkpointing",
          "[fsdp][checkpoint]") {
  using accel::config::ShardingStrategy;
  for (auto strategy : {ShardingStrategy::FULL_SHARD, ShardingStrategy::SHARD_GRAD_OP, ShardingStrategy::NO_SHARD}) {
    INFO(accel::config::to_string(strategy));
    auto job = tiny_fsdp_job();
    job.fsdp.sharding_strategy = strategy;
    RecomputeRun stored = train_recomputed(job);
    job.fsdp.activation_checkpointing = true;
    RecomputeRun recomputed = train_recomputed(job);
    CHECK(stored.grad_norms == recomputed.grad_norms);
    REQUIRE(stored.params.size() == recomputed.params.size());
    REQUIRE_FALSE(stored.params.empty());
    for (size_t i = 0; i < stored.params.size(); ++i) CHECK(at::equal(stored.params[i], recomputed.params[i]));
  }
}

ACCEL_ASSERT_CHECK_IS_CATCH();
