// Evaluation over ranks (evaluation.hpp): the held-out batches are dealt round-robin, and a rank past
// the last one repeats batch 0 with weight 0, so every rank runs the same number of forwards. At an
// odd batch count on two ranks there is such a padding batch; counted, it would add batch 0 twice.
// Checked at worlds 2 and 4 against world 1, in process (FakeWorld threads), on one model.
#include "tests/support/catch_with_torch.hpp"

#include <ATen/core/grad_mode.h>

#include <cmath>
#include <optional>

#include "runtime/comm/fake_communicator.hpp"
#include "tests/comm/comm_test_support.hpp"
#include "trainer/data/dataset.hpp"
#include "trainer/data/synthetic_tokens.hpp"
#include "trainer/evaluation.hpp"
#include "trainer/models/builtin_module.hpp"
#include "trainer/models/builtin_ops.hpp"

using namespace accel;

namespace {

constexpr int kRows = 2;  // evaluation batch rows

// 161 synthetic tokens in windows of 8: (161 - 1) / 8 = 20 windows, the last 5 held out
// (val_fraction 0.25): evaluation batches of 2, 2 and 1 rows, an odd count.
train::Dataset held_out_data() {
  config::DataSection section;
  section.val_fraction = 0.25;
  return train::Dataset(train::TokenStore::owned(train::synthetic_tokens(5, 32, 161)), section, 8, 5);
}

// The tiny GPT (tests/engine/tiny_job.hpp's), spec-initialised, its token embedding (tied with the
// output) scaled up: at the spec init's std 0.02 the logits are nearly uniform and every batch's
// loss is ln 32 within 1e-3, too close for a miscounted batch to stand out from rounding.
std::shared_ptr<train::BuiltinModule> model() {
  config::ModelSection section;
  section.n_layer = 2;
  section.n_head = 2;
  section.n_embd = 16;
  section.vocab_size = 32;
  section.block_size = 8;
  auto module = train::make_builtin_module(section);
  module->initialize(3);
  at::NoGradGuard no_grad;
  module->spec_parameters().front().second.mul_(25);  // wte, first in spec order
  return module;
}

double evaluate_at(int world) {
  comm::FakeWorld fake(world);
  const train::Dataset data = held_out_data();
  std::optional<double> rank0;
  auto errors = test::run_ranks(
      world, [&](int r) { return fake.communicator(r); },
      [&](comm::Communicator& comm) {
        auto m = model();  // each rank its own copy, as after a step every rank holds the same weights
        const std::optional<double> loss = train::evaluate(*m, data, comm, kRows);
        if (comm.rank() == 0) rank0 = loss;
      });
  REQUIRE(errors == std::vector<std::string>(size_t(world), ""));
  REQUIRE(rank0);
  return *rank0;
}

}  // namespace

TEST_CASE("evaluation: an odd batch count gives the world-1 loss at worlds 2 and 4 (padding not counted)",
          "[evaluation]") {
  const train::Dataset data = held_out_data();
  REQUIRE(data.num_val_batches(kRows) == 3);
  const double one = evaluate_at(1);
  // Every rank computes each batch's loss from the same weights and rows; only the fp64 sums over
  // batches are regrouped (tokens x loss, and tokens). Kernels on other threads may still reorder
  // a batch's fp32 sums: its mean over <= 16 tokens, after inner products of <= 64 terms, moves by
  // at most (16 + 64) u = 80 x 2^-24 = 4.8e-6 of its magnitude (Higham 3.1). Measured: 0.
  const double bound = 80 * std::ldexp(1.0, -24);
  // A counted padding batch (batch 0's 16 tokens again, 56 in all) moves the mean by 16/56 of
  // batch 0's distance from it: required here to be over 1000 bounds (measured 0.39 of 7.87).
  auto m = model();
  at::NoGradGuard no_grad;
  const train::Batch first = data.val_batch(0, kRows);
  const double batch0 = train::token_cross_entropy(m->forward(first.x), first.y).item<double>();
  CAPTURE(one, batch0);
  REQUIRE(std::abs(batch0 - one) / one > 1000 * bound);
  for (int world : {2, 4}) {
    const double got = evaluate_at(world);
    CAPTURE(world, got, std::abs(got - one) / one);
    CHECK(std::abs(got - one) / one <= bound);
  }
}

ACCEL_ASSERT_CHECK_IS_CATCH();
