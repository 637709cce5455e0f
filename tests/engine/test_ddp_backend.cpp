// The ddp backend over an in-process world (FakeWorld, one thread per rank): gradients equal the
// global-batch gradient, accumulation micro-steps send nothing, buckets are all-reduced while
// backward is still running, and diverged replicas are caught.
#include "tests/support/catch_with_torch.hpp"

#include <ATen/core/grad_mode.h>
#include <atomic>

#include "engine/replicated/ddp_backend.hpp"
#include "runtime/comm/fake_communicator.hpp"
#include "tests/comm/comm_test_support.hpp"
#include "tests/support/prepared_builtin.hpp"

using accel::engine::DdpBackend;
using accel::comm::Communicator;
using accel::comm::FakeWorld;
using accel::test::builtin_module;
using accel::test::PreparedBuiltin;

namespace {

accel::config::JobConfig small_job(double bucket_cap_mb) {
  accel::config::JobConfig job;
  job.model.name = accel::config::ModelName::gpt;
  job.model.n_layer = 2;
  job.model.n_head = 2;
  job.model.n_embd = 16;
  job.model.vocab_size = 32;
  job.model.block_size = 8;
  job.ddp.bucket_cap_mb = bucket_cap_mb;
  return job;
}

at::Tensor ddp_tokens(int rows, int offset) {
  return (at::arange(rows * 8, at::TensorOptions(at::kLong)) * 7 + offset).remainder(32).view({rows, 8});
}

// Wraps a communicator and lets the test observe each all_reduce as it is issued.
class ObservedCommunicator : public Communicator {
 public:
  ObservedCommunicator(Communicator& inner, std::function<void()> on_all_reduce)
      : inner_(&inner), on_all_reduce_(std::move(on_all_reduce)) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string backend_name() const override { return "observed"; }
  std::chrono::milliseconds timeout() const override { return inner_->timeout(); }
  accel::comm::WorkPtr all_reduce(at::Tensor t, accel::comm::ReduceOp op) override {
    if (on_all_reduce_) on_all_reduce_();
    ++all_reduces;
    return inner_->all_reduce(t, op);
  }
  accel::comm::WorkPtr reduce_scatter(at::Tensor i, at::Tensor o, accel::comm::ReduceOp op) override {
    return inner_->reduce_scatter(i, o, op);
  }
  accel::comm::WorkPtr all_gather(at::Tensor i, at::Tensor o) override { return inner_->all_gather(i, o); }
  accel::comm::WorkPtr broadcast(at::Tensor t, int root) override { return inner_->broadcast(t, root); }
  accel::comm::WorkPtr barrier() override { return inner_->barrier(); }
  int all_reduces = 0;

 private:
  Communicator* inner_;
  std::function<void()> on_all_reduce_;
};

// The ddp engine over the built-in model's units, as prepared for the trainer.
PreparedBuiltin::EngineFactory ddp_engine(Communicator& comm, const accel::config::JobConfig& job) {
  return [&comm, &job](std::vector<accel::engine::UnitSpec> specs) {
    return std::make_unique<DdpBackend>(comm, std::move(specs), accel::engine::builtin_optimizer_setup(job.optimizer),
                                        job.ddp.bucket_cap_mb);
  };
}

}  // namespace

TEST_CASE("ddp at world 2: every rank ends with the gradient of the global batch", "[ddp]") {
  auto job = small_job(0.002);  // ~500 values per bucket: several buckets
  // The single-process gradient of the mean loss over both ranks' rows (equal row counts, so the
  // mean over the union is the average of the two rank means).
  auto reference = builtin_module(job.model, 11);
  at::Tensor x = at::cat({ddp_tokens(2, 0), ddp_tokens(2, 5)}), y = at::cat({ddp_tokens(2, 1), ddp_tokens(2, 6)});
  PreparedBuiltin::loss(reference->forward(x), y).backward();
  auto expected = reference->spec_parameters();

  FakeWorld world(2);
  std::vector<std::vector<at::Tensor>> grads(2);
  auto errors = accel::test::run_ranks(
      2, [&](int r) { return world.communicator(r); },
      [&](Communicator& comm) {
        int r = comm.rank();
        PreparedBuiltin model(job, builtin_module(job.model, 11), ddp_engine(comm, job));
        auto& ddp = model.engine();
        // No forward hooks: readiness comes from the parameters' AccumulateGrad hooks.
        auto* hooks = ddp.begin_micro_step(0, true);
        if (hooks) throw std::runtime_error("ddp returned unit hooks");
        model.loss(model.forward(ddp_tokens(2, r * 5), hooks), ddp_tokens(2, r * 5 + 1)).backward();
        ddp.end_micro_step(true);
        for (auto& [name, p] : model.parameters()) grads[size_t(r)].push_back(p.grad().clone());
      });
  CHECK(errors == std::vector<std::string>{"", ""});
  for (int r = 0; r < 2; ++r)
    for (size_t i = 0; i < expected.size(); ++i) {
      INFO("rank " << r << " " << expected[i].first);
      // fp32: the two half-batch gradients are summed in another order than the full-batch ones.
      CHECK(at::allclose(grads[size_t(r)][i], expected[i].second.grad(), 1e-5, 1e-6));
    }
}

TEST_CASE("ddp: accumulation micro-steps communicate nothing; the last one all-reduces during backward", "[ddp]") {
  auto job = small_job(0.002);
  FakeWorld world(2);
  std::vector<int> after_first(2), issued_in_backward(2), total(2), wpe_zero_at_first(2);
  auto errors = accel::test::run_ranks(
      2, [&](int r) { return world.communicator(r); },
      [&](Communicator& base) {
        int r = base.rank();
        auto module = builtin_module(job.model, 3);
        at::Tensor wpe;
        for (auto& [name, p] : module->spec_parameters())
          if (name == "wpe.weight") wpe = p;
        std::atomic<bool> in_backward{false};
        int seen = 0, first_wpe_zero = -1;
        ObservedCommunicator comm(base, [&] {
          if (!in_backward) return;
          ++seen;
          if (first_wpe_zero < 0) first_wpe_zero = wpe.grad().abs().sum().item<double>() == 0.0;
        });
        PreparedBuiltin model(job, module, ddp_engine(comm, job));
        auto& ddp = model.engine();
        int before = comm.all_reduces;
        ddp.begin_micro_step(0, false);
        model.loss(model.forward(ddp_tokens(2, r), nullptr), ddp_tokens(2, r + 1)).backward();
        ddp.end_micro_step(false);
        after_first[size_t(r)] = comm.all_reduces - before;
        // The accumulation step left wpe's gradient non-zero: zero it to observe the sync step alone.
        wpe.grad().zero_();
        auto* hooks = ddp.begin_micro_step(1, true);
        at::Tensor loss = model.loss(model.forward(ddp_tokens(2, r + 2), hooks), ddp_tokens(2, r + 3));
        in_backward = true;
        loss.backward();
        in_backward = false;
        ddp.end_micro_step(true);
        issued_in_backward[size_t(r)] = seen;
        total[size_t(r)] = comm.all_reduces - before;
        wpe_zero_at_first[size_t(r)] = first_wpe_zero;
      });
  CHECK(errors == std::vector<std::string>{"", ""});
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r);
    CHECK(after_first[size_t(r)] == 0);
    CHECK(total[size_t(r)] > 2);  // several buckets at this cap
    // Buckets of later units go out while autograd still works on earlier ones: the first
    // all-reduce happens before the embedding (first in forward, last in backward) has a gradient.
    // The embedding's bucket goes out inside backward too, from wte's AccumulateGrad hook (its
    // gradient, summed over both uses, is the last one complete).
    CHECK(issued_in_backward[size_t(r)] == total[size_t(r)]);
    CHECK(wpe_zero_at_first[size_t(r)] == 1);
  }
}

TEST_CASE("ddp: replicas stay identical through optimizer steps, and a diverged replica is reported", "[ddp]") {
  auto job = small_job(25);
  FakeWorld world(2);
  std::vector<std::string> outcome(2);
  auto errors = accel::test::run_ranks(
      2, [&](int r) { return world.communicator(r); },
      [&](Communicator& comm) {
        int r = comm.rank();
        // Different seeds: the constructor's broadcast must align them.
        PreparedBuiltin model(job, builtin_module(job.model, uint64_t(5 + r)), ddp_engine(comm, job));
        auto& ddp = model.engine();
        for (int step = 0; step < 3; ++step) {
          auto* hooks = ddp.begin_micro_step(0, true);
          model.loss(model.forward(ddp_tokens(2, r + step), hooks), ddp_tokens(2, r + step + 1)).backward();
          ddp.end_micro_step(true);
          ddp.clip_grad_norm(1.0);
          ddp.optimizer_step(1e-2);
        }
        ddp.full_parameters();  // throws if the replicas differ
        if (r == 1) {
          at::NoGradGuard no_grad;
          model.parameters()[3].second.view(-1)[0].add_(1e-3);
        }
        try {
          ddp.full_parameters();
          outcome[size_t(r)] = "no error";
        } catch (const std::exception& e) {
          outcome[size_t(r)] = e.what();
        }
      });
  CHECK(errors == std::vector<std::string>{"", ""});
  for (const auto& o : outcome) CHECK_THAT(o, Catch::Matchers::Contains("replicas differ"));
}

ACCEL_ASSERT_CHECK_IS_CATCH();
