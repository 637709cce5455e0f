// The engines over a plain torch::nn::Module described by UnitSpecs (docs/design/0015, design A): no
// unit hooks in the forward, so gradient readiness comes from the AccumulateGrad hooks alone.
// Every strategy that keeps parameters gathered must give the update of the unsharded run.
#include "tests/support/catch_with_torch.hpp"

#include <torch/torch.h>

#include "engine/backend.hpp"
#include "engine/grad_ready_hooks.hpp"
#include "runtime/comm/fake_communicator.hpp"
#include "tests/comm/comm_test_support.hpp"

using accel::engine::UnitSpec;
using accel::comm::Communicator;

TEST_CASE("AccumulateGrad hooks: once per pass for a parameter used twice; before() can redirect .grad",
          "[hooks]") {
  at::Tensor w = torch::randn({3}).requires_grad_(true);
  at::Tensor buffer = torch::zeros({8});
  std::vector<int> before, after;
  {
    accel::engine::GradReadyHooks hooks(
        {w},
        [&](int i) {
          before.push_back(i);
          w.mutable_grad() = buffer.narrow(0, 2, 3);  // autograd adds into it in place
        },
        [&](int i) { after.push_back(i); });
    at::Tensor x = torch::ones({3});
    ((w * x).sum() + (w * x * 2).sum()).backward();  // two uses: one summed gradient
    CHECK(before == std::vector<int>{0});
    CHECK(after == std::vector<int>{0});
    CHECK(w.grad().data_ptr() == buffer.narrow(0, 2, 3).data_ptr());
    CHECK(torch::equal(buffer, torch::tensor({0.f, 0.f, 3.f, 3.f, 3.f, 0.f, 0.f, 0.f})));
  }
  (w * 2).sum().backward();  // the hooks are gone with their owner
  CHECK(after.size() == 1);
  CHECK(torch::equal(buffer.narrow(0, 2, 3), torch::full({3}, 5.f)));
}

namespace {

struct NetImpl : torch::nn::Module {
  NetImpl() {
    a = register_module("a", torch::nn::Linear(5, 7));
    b = register_module("b", torch::nn::Linear(7, 7));
    c = register_module("c", torch::nn::Linear(7, 2));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = torch::tanh(a(x));
    x = x + torch::tanh(b(x));
    return c(x);
  }
  torch::nn::Linear a{nullptr}, b{nullptr}, c{nullptr};
};
TORCH_MODULE(Net);

// Each child a unit; two parameter groups (weights decay, biases do not), as a user optimizer has.
std::vector<UnitSpec> specs_of(Net& net) {
  std::vector<UnitSpec> out;
  for (const auto& child : net->named_children()) {
    UnitSpec spec;
    spec.name = child.key();
    for (const auto& p : child.value()->named_parameters()) {
      spec.params.emplace_back(child.key() + "." + p.key(), p.value());
      spec.groups.push_back(p.value().dim() >= 2 ? 0 : 1);
    }
    out.push_back(std::move(spec));
  }
  return out;
}

accel::engine::OptimizerSetup two_groups() {
  accel::engine::OptimizerSetup setup;
  accel::engine::GroupHyper decay;
  decay.lr = 0.05;
  decay.weight_decay = 0.1;
  accel::engine::GroupHyper plain = decay;
  plain.weight_decay = 0;
  plain.lr = 0.02;  // another learning rate: groups must not be mixed up
  setup.groups = {decay, plain};
  return setup;
}

// Deterministic values without the global generator (the ranks are threads of one process).
void set_values(Net& net) {
  at::NoGradGuard no_grad;
  int k = 0;
  for (auto& p : net->parameters()) {
    p.copy_((torch::arange(p.numel(), torch::kFloat) * 0.37 + k++).sin().view(p.sizes()) * 0.3);
  }
}

at::Tensor rows(int n, int offset) { return torch::linspace(-1, 1, n * 5).view({n, 5}) * (1 + offset); }

// Three steps, two micro-steps each; `zero_grad_to_none` calls a torch optimizer-style
// zero_grad(set_to_none) on every parameter between steps. Returns rank 0's full parameters.
std::vector<at::Tensor> train_prepared(accel::config::JobConfig job, int world, bool zero_grad_to_none = false) {
  accel::comm::FakeWorld fake(world);
  std::vector<at::Tensor> full;
  auto errors = accel::test::run_ranks(
      world, [&](int r) { return fake.communicator(r); },
      [&](Communicator& comm) {
        Net net;
        set_values(net);
        auto backend = accel::engine::make_backend(job, comm, specs_of(net), two_groups());
        backend->wait_parameters();
        for (int step = 0; step < 3; ++step) {
          for (int m = 0; m < 2; ++m) {
            backend->begin_micro_step(m, m == 1);
            backend->rearm_grads();
            // The global batch of a micro-step is 4 rows; each rank takes its share.
            at::Tensor x = rows(4, step * 2 + m).narrow(0, comm.rank() * (4 / world), 4 / world);
            (net->forward(x).pow(2).mean() / 2.0).backward();
            backend->end_micro_step(m == 1);
          }
          backend->clip_grad_norm(1.0);
          backend->optimizer_step(backend->optimizer_setup().groups);
          backend->wait_parameters();
          if (zero_grad_to_none) {  // what libtorch 2.x's Optimizer::zero_grad() does to each .grad
            for (auto& p : net->parameters())
              if (p.mutable_grad().defined()) {
                p.mutable_grad().detach_();  // throws for an autograd view: accel's aliases are not views
                p.mutable_grad().reset();
              }
          }
        }
        auto params = backend->full_parameters();
        if (comm.rank() == 0)
          for (auto& [name, t] : params) full.push_back(t);
      });
  CHECK(errors == std::vector<std::string>(size_t(world), ""));
  return full;
}

accel::config::JobConfig job_for(accel::config::Backend backend, int stage = 0,
                                 accel::config::ShardingStrategy strategy = accel::config::ShardingStrategy::FULL_SHARD) {
  accel::config::JobConfig job;
  job.backend = backend;
  job.deepspeed.zero_stage = stage;
  job.fsdp.sharding_strategy = strategy;
  return job;
}

}  // namespace

TEST_CASE("a module without unit hooks: ddp, zero 1-2 and SHARD_GRAD_OP at world 2 match world 1", "[prepared]") {
  using accel::config::Backend;
  const auto reference = train_prepared(job_for(Backend::ddp), 1);
  REQUIRE(reference.size() == 6);
  struct Case {
    std::string name;
    accel::config::JobConfig job;
  };
  for (const auto& c : {Case{"ddp", job_for(Backend::ddp)}, Case{"zero 1", job_for(Backend::deepspeed, 1)},
                        Case{"zero 2", job_for(Backend::deepspeed, 2)},
                        Case{"SHARD_GRAD_OP", job_for(Backend::fsdp, 0, accel::config::ShardingStrategy::SHARD_GRAD_OP)},
                        Case{"NO_SHARD", job_for(Backend::fsdp, 0, accel::config::ShardingStrategy::NO_SHARD)}}) {
    const auto got = train_prepared(c.job, 2);
    REQUIRE(got.size() == reference.size());
    for (size_t i = 0; i < got.size(); ++i) {
      // fp32: the two half-batch means are averaged instead of one mean over 4 rows (reassociation).
      CAPTURE(c.name, i, (got[i] - reference[i]).abs().max().item<double>());
      CHECK(at::allclose(got[i], reference[i], 1e-5, 1e-6));
    }
  }
}

TEST_CASE("a user's zero_grad(set_to_none) between steps changes nothing", "[prepared]") {
  using accel::config::Backend;
  for (const auto& job : {job_for(Backend::ddp), job_for(Backend::deepspeed, 1), job_for(Backend::deepspeed, 2)}) {
    const auto kept = train_prepared(job, 2), dropped = train_prepared(job, 2, /*zero_grad_to_none=*/true);
    REQUIRE(kept.size() == dropped.size());
    for (size_t i = 0; i < kept.size(); ++i) CHECK(torch::equal(kept[i], dropped[i]));
  }
}

TEST_CASE("a module without unit hooks: stage 3 and FULL_SHARD are refused, naming design B", "[prepared]") {
  using accel::config::Backend;
  accel::comm::FakeWorld fake(1);
  auto comm = fake.communicator(0);
  for (const auto& job : {job_for(Backend::deepspeed, 3), job_for(Backend::fsdp, 0),
                          job_for(Backend::fsdp, 0, accel::config::ShardingStrategy::HYBRID_SHARD)}) {
    Net net;
    set_values(net);
    CHECK_THROWS_WITH(accel::engine::make_backend(job, *comm, specs_of(net), two_groups()),
                      Catch::Matchers::Contains("no unit boundaries") && Catch::Matchers::Contains("design B") &&
                          Catch::Matchers::Contains("wrap the blocks in accel::Unit<>"));
  }
}

ACCEL_ASSERT_CHECK_IS_CATCH();
