// The trainer's gradient accumulation (trainer.hpp): G micro-steps each backward (micro loss / G),
// so a step of micro 2 rows x 2 micro-steps has the gradient of micro 4 x 1 on the same global
// batch (dataset.hpp: a step's rows are the same for every split of W*B*G). Run at world 1 on the
// built-in trainer itself, in process. A loss divided by G twice (by the trainer and again by the
// Accelerator's objective) halves the accumulated gradient, and only at G > 1.
#include "tests/support/catch_with_torch.hpp"

#include <cmath>

#include "tests/train/trainer/in_process_trainer.hpp"

namespace {

double relative_gap(double a, double b) { return std::abs(a - b) / std::abs(b); }

}  // namespace

TEST_CASE("trainer: micro 2 x accumulation 2 gives the step of micro 4 x accumulation 1", "[trainer][accumulation]") {
  const auto whole = accel::test::run_trainer_in_process(accel::test::tiny_trainer_job(1, 4, 1), 1);
  const auto split = accel::test::run_trainer_in_process(accel::test::tiny_trainer_job(1, 2, 2), 1);
  REQUIRE(whole.errors == std::vector<std::string>{""});
  REQUIRE(split.errors == std::vector<std::string>{""});
  REQUIRE(whole.steps.size() == 1);
  REQUIRE(split.steps.size() == 1);
  const double norm_whole = whole.steps[0]["grad_norm"], norm_split = split.steps[0]["grad_norm"];
  const double loss_whole = whole.steps[0]["loss"], loss_split = split.steps[0]["loss"];
  CAPTURE(norm_whole, norm_split, loss_whole, loss_split);
  REQUIRE(norm_whole > 0);
  // The two runs do the same fp32 arithmetic but for the grouping of the 4 rows: one mean over 32
  // tokens against two means over 16, halved (exactly: a power of two) and added. Each gradient
  // element is a sum over the 32 tokens of terms that each end a chain of roundings in that token's
  // forward and backward: 2 layers of inner products of at most 64 terms (the MLP's 4 x 16), norms
  // and softmaxes of at most 32, fewer than 2048 roundings in all. Whatever a kernel reorders
  // between the two groupings moves the element by at most gamma_2048 ~ 2048 u (u = 2^-24) of the
  // magnitudes summed (Higham, Accuracy and Stability, ch. 3-4), 1.2e-4, and the norm by no more.
  // Measured: 1.3e-8 in the norm, 3.4e-8 in the loss. A loss divided by G twice halves the norm
  // (relative difference 0.5).
  const double bound = 2048 * std::ldexp(1.0, -24);
  CHECK(relative_gap(norm_split, norm_whole) <= bound);
  // The loss is the forward's alone (the mean of the micro losses), the same sums regrouped.
  CHECK(relative_gap(loss_split, loss_whole) <= bound);
}

ACCEL_ASSERT_CHECK_IS_CATCH();
