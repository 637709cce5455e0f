// fp16 loss scaling through the backends (grad_scaling.hpp, as the Accelerator drives it), on fp32
// compute so that what scaling adds is seen alone (fp16 runs end to end in
// tests/numerics/test_mixed_precision.py). Checked here at world 2, for the ddp engine, ZeRO-1 and
// ZeRO-3:
//  - a power-of-two scale changes nothing: every product and sum in backward, the gradient
//    average, the unscale and the clip commute exactly with multiplying by 2^k, so norms and
//    weights are bitwise those of the unscaled run;
//  - an overflowed step (an infinite loss on one rank, so every rank's reduced gradients are
//    non-finite) is skipped on every rank: weights, Adam's moments and step count, and the
//    learning-rate schedule stay as they were, so the run equals one that never saw that batch;
//    the scale halves (hysteresis 1);
//  - so is an overflow that is one +inf gradient element on one rank and no NaN anywhere (the
//    infinite loss above makes NaNs: a NaN-only check would miss it).
#include "tests/support/catch_with_torch.hpp"

#include <cmath>
#include <limits>
#include <optional>

#include "engine/backend.hpp"
#include "runtime/comm/fake_communicator.hpp"
#include "engine/grad_scaling.hpp"
#include "trainer/lr_schedule.hpp"
#include "tests/engine/tiny_job.hpp"
#include "tests/comm/comm_test_support.hpp"
#include "tests/support/prepared_builtin.hpp"

using accel::comm::Communicator;
// Spelt apart from accel::engine::Backend, which other files of test_engine take in (unity batches).
using ConfigBackend = accel::config::Backend;
using accel::config::JobConfig;
using accel::engine::LossScalerSettings;
using accel::engine::GradScaling;

namespace {

struct StepOutcome {
  double grad_norm = 0;
  double lr = 0;
  bool skipped = false;
  double loss_scale = 1;
};

at::Tensor scaling_tokens(int rank, int batch) {
  return (at::arange(16, at::TensorOptions(at::kLong)) * 3 + 7 * rank + 5 * batch).remainder(32).view({2, 8});
}

JobConfig scaling_job(ConfigBackend backend, int zero_stage) {
  JobConfig job = accel::test::tiny_job(backend);
  job.deepspeed.zero_stage = zero_stage;
  job.training.max_steps = 4;
  job.scheduler.warmup_steps = 3;  // the learning rate changes every step
  job.optimizer.lr = 1e-2;
  job.training.max_grad_norm = 0.5;  // some steps clip
  return job;
}

struct ScaledRun {
  std::vector<StepOutcome> steps;     // rank 0's
  std::vector<bool> rank1_skipped;    // rank 1's decisions
  std::vector<at::Tensor> weights;    // rank 0's full parameters at the end
};

// How rank 1 overflows: its loss times infinity (NaN and infinite gradients), or a single +inf in
// one element of one gradient (the token embedding's first), every other gradient as it was.
enum class Overflow { infinite_loss, one_inf_element };

// Trains `batches` (one micro-step each), overflowing on rank 1 at step `overflow_step` (-1:
// never), with an optional loss scaler.
ScaledRun train_scaled(const JobConfig& job, std::optional<LossScalerSettings> scaler, const std::vector<int>& batches,
          int overflow_step = -1, Overflow overflow = Overflow::infinite_loss) {
  accel::comm::FakeWorld world(2);
  ScaledRun run;
  auto errors = accel::test::run_ranks(
      2, [&](int r) { return world.communicator(r); },
      [&](Communicator& comm) {
        const int r = comm.rank();
        accel::test::PreparedBuiltin model(job, comm, accel::test::builtin_module(job.model, 11));
        auto* backend = &model.engine();
        GradScaling scaling(scaler);
        for (size_t s = 0; s < batches.size(); ++s) {
          auto* hooks = backend->begin_micro_step(0, true);
          at::Tensor loss = model.loss(model.forward(scaling_tokens(r, batches[s]), hooks), scaling_tokens(r, batches[s] + 1));
          at::Tensor objective = scaling.objective(loss, 1);  // as the Accelerator: (loss / G) x scale
          if (int(s) == overflow_step && r == 1) {
            const double inf = std::numeric_limits<double>::infinity();
            if (overflow == Overflow::infinite_loss) {
              objective = objective * inf;
            } else {
              // d/dw of (w * inf) is +inf for that one element: autograd adds it to the embedding's
              // gradient there (the other elements get zeros), before the engine sees the gradient.
              const at::Tensor wte = model.parameters().front().second;  // a copy: parameters() is a temporary
              objective = objective + wte.flatten()[0] * inf;
            }
          }
          objective.backward();
          backend->end_micro_step(true);
          // The boundary as the Accelerator and the trainer run it: clip, the schedule over applied
          // steps, then the step or its skip.
          StepOutcome out;
          out.loss_scale = scaling.scale();
          out.grad_norm = scaling.unscale_and_clip(*backend, job.training.max_grad_norm);
          out.lr = accel::train::learning_rate(job.scheduler, job.optimizer.lr, int64_t(s) - scaling.skipped_steps(),
                                               job.training.max_steps);
          out.skipped = scaling.skip_step(*backend);
          if (out.skipped)
            backend->skip_step();
          else
            backend->optimizer_step(out.lr);
          if (r == 0) run.steps.push_back(out);
          if (r == 1) run.rank1_skipped.push_back(out.skipped);
        }
        auto full = backend->full_parameters();
        if (r == 0)
          for (auto& [n, t] : full) run.weights.push_back(t);
      });
  CHECK(errors == std::vector<std::string>{"", ""});
  return run;
}

bool same_weights(const ScaledRun& a, const ScaledRun& b) {
  if (a.weights.size() != b.weights.size() || a.weights.empty()) return false;
  for (size_t i = 0; i < a.weights.size(); ++i)
    if (!at::equal(a.weights[i], b.weights[i])) return false;
  return true;
}

LossScalerSettings dynamic_scaler() {
  LossScalerSettings s;
  s.initial_scale_power = 10;
  s.window = 100;
  s.hysteresis = 1;
  s.min_scale = 1;
  return s;
}

}  // namespace

TEST_CASE("a power-of-two loss scale leaves norms and weights bitwise unchanged", "[loss_scaling]") {
  for (auto [backend, stage] : {std::pair{ConfigBackend::ddp, 0}, std::pair{ConfigBackend::deepspeed, 1},
                                std::pair{ConfigBackend::deepspeed, 3}, std::pair{ConfigBackend::fsdp, 0}}) {
    JobConfig job = scaling_job(backend, stage);
    CAPTURE(accel::config::to_string(backend), stage);
    const ScaledRun plain = train_scaled(job, std::nullopt, {0, 1, 2, 3});
    const ScaledRun scaled = train_scaled(job, dynamic_scaler(), {0, 1, 2, 3});
    REQUIRE(scaled.steps.size() == 4);
    for (size_t s = 0; s < 4; ++s) {
      CHECK(scaled.steps[s].loss_scale == 1024);
      CHECK_FALSE(scaled.steps[s].skipped);
      CHECK(scaled.steps[s].grad_norm == plain.steps[s].grad_norm);  // exactly
      CHECK(scaled.steps[s].lr == plain.steps[s].lr);
    }
    CHECK(std::any_of(plain.steps.begin(), plain.steps.end(), [](const StepOutcome& o) { return o.grad_norm > 0.5; }));
    CHECK(same_weights(scaled, plain));
  }
}

TEST_CASE("an overflowed step is skipped on every rank and leaves no trace", "[loss_scaling]") {
  for (auto [backend, stage] : {std::pair{ConfigBackend::ddp, 0}, std::pair{ConfigBackend::deepspeed, 1},
                                std::pair{ConfigBackend::deepspeed, 3}}) {
    JobConfig job = scaling_job(backend, stage);
    CAPTURE(accel::config::to_string(backend), stage);
    const ScaledRun overflowed = train_scaled(job, dynamic_scaler(), {0, 1, 2, 3}, /*overflow_step=*/1);
    const ScaledRun without_batch_1 = train_scaled(job, std::nullopt, {0, 2, 3});
    REQUIRE(overflowed.steps.size() == 4);
    CHECK_FALSE(std::isfinite(overflowed.steps[1].grad_norm));
    CHECK(overflowed.steps[1].skipped);
    CHECK(overflowed.rank1_skipped == std::vector<bool>{false, true, false, false});
    CHECK(overflowed.steps[1].loss_scale == 1024);
    CHECK(overflowed.steps[2].loss_scale == 512);  // halved after the overflow (hysteresis 1)
    // The schedule did not advance over the skipped step: step 2 runs at the lr of applied step 1.
    CHECK(overflowed.steps[2].lr == without_batch_1.steps[1].lr);
    CHECK(overflowed.steps[3].grad_norm == without_batch_1.steps[2].grad_norm);
    CHECK(same_weights(overflowed, without_batch_1));
  }
}

TEST_CASE("an overflow that is +inf in one gradient element of one rank, not NaN, is skipped on every rank",
          "[loss_scaling]") {
  for (auto [backend, stage] : {std::pair{ConfigBackend::ddp, 0}, std::pair{ConfigBackend::deepspeed, 1},
                                std::pair{ConfigBackend::deepspeed, 3}}) {
    JobConfig job = scaling_job(backend, stage);
    CAPTURE(accel::config::to_string(backend), stage);
    const ScaledRun overflowed = train_scaled(job, dynamic_scaler(), {0, 1, 2, 3}, /*overflow_step=*/1, Overflow::one_inf_element);
    const ScaledRun without_batch_1 = train_scaled(job, std::nullopt, {0, 2, 3});
    REQUIRE(overflowed.steps.size() == 4);
    // The averaged gradient holds +inf in one element and no NaN: the norm is +inf, not NaN.
    CHECK(std::isinf(overflowed.steps[1].grad_norm));
    CHECK(overflowed.steps[1].grad_norm > 0);
    CHECK(overflowed.steps[1].skipped);
    CHECK(overflowed.rank1_skipped == std::vector<bool>{false, true, false, false});
    CHECK(overflowed.steps[2].loss_scale == 512);  // halved (hysteresis 1)
    CHECK(overflowed.steps[2].lr == without_batch_1.steps[1].lr);
    CHECK(same_weights(overflowed, without_batch_1));  // nothing moved: no NaN or zeroed element either
  }
}

TEST_CASE("the loss scaling's checkpoint state: the scale and the skipped count come back", "[loss_scaling]") {
  accel::engine::LossScaler scaler(dynamic_scaler());
  scaler.update(true);  // 1024 -> 512
  GradScaling resumed(dynamic_scaler());
  resumed.restore({{"loss_scaler", scaler.state()}, {"skipped_steps", 3}});
  CHECK(resumed.scale() == 512);
  CHECK(resumed.skipped_steps() == 3);
  CHECK(resumed.state()["skipped_steps"] == 3);
  // A checkpoint written without fp16 starts the scaler afresh; without fp16 there is no state.
  GradScaling fresh(dynamic_scaler());
  fresh.restore(nlohmann::json::object());
  CHECK(fresh.scale() == 1024);
  JobConfig job = scaling_job(ConfigBackend::deepspeed, 1);
  GradScaling plain(job);  // mixed_precision no
  CHECK(plain.state().empty());
  CHECK_FALSE(plain.active());
  job.mixed_precision = accel::config::MixedPrecision::fp16;
  CHECK(GradScaling(job).scale() == 65536);  // deepspeed's initial_scale_power 16
}

TEST_CASE("clipping twice at one boundary unscales the gradients once", "[loss_scaling]") {
  // A program may call clip_grad_norm more than once per step; the second call must see the true
  // gradients (already divided by the scale), not divide them again.
  for (auto [backend, stage] : {std::pair{ConfigBackend::ddp, 0}, std::pair{ConfigBackend::deepspeed, 3}}) {
    JobConfig job = scaling_job(backend, stage);
    CAPTURE(accel::config::to_string(backend), stage);
    accel::comm::FakeWorld world(2);
    std::vector<double> norms(4, 0.0);  // rank 0: plain first, plain second, scaled first, scaled second
    auto errors = accel::test::run_ranks(
        2, [&](int r) { return world.communicator(r); },
        [&](Communicator& comm) {
          for (int scaled = 0; scaled < 2; ++scaled) {
            accel::test::PreparedBuiltin model(job, comm, accel::test::builtin_module(job.model, 11));
            auto* engine = &model.engine();
            GradScaling scaling(scaled ? std::optional<LossScalerSettings>(dynamic_scaler()) : std::nullopt);
            auto* hooks = engine->begin_micro_step(0, true);
            at::Tensor loss = model.loss(model.forward(scaling_tokens(comm.rank(), 0), hooks), scaling_tokens(comm.rank(), 1));
            scaling.objective(loss, 1).backward();
            engine->end_micro_step(true);
            const double first = scaling.unscale_and_clip(*engine, 0.0);
            const double second = scaling.unscale_and_clip(*engine, 0.0);
            if (comm.rank() == 0) {
              norms[size_t(2 * scaled)] = first;
              norms[size_t(2 * scaled + 1)] = second;
            }
          }
        });
    CHECK(errors == std::vector<std::string>{"", ""});
    CHECK(norms[0] > 0);
    CHECK(norms[1] == norms[0]);
    CHECK(norms[2] == norms[0]);  // a power-of-two scale is exact
    CHECK(norms[3] == norms[0]);  // not divided by 1024 again
  }
}

ACCEL_ASSERT_CHECK_IS_CATCH();
