// The fp16 loss scaler against a trace worked out by hand from DeepSpeed's DynamicLossScaler
// rules (loss_scaler.hpp), the static scale, torch GradScaler's settings, and checkpoint state.
#include <catch2/catch.hpp>

#include <vector>

#include "engine/optim/loss_scaler.hpp"
#include "runtime/common/errors.hpp"

using accel::RunError;
using accel::engine::LossScaler;
using accel::engine::LossScalerSettings;

namespace {

LossScalerSettings small_dynamic() {
  LossScalerSettings s;
  s.initial_scale_power = 3;  // 8
  s.window = 3;
  s.hysteresis = 2;
  s.min_scale = 2;
  return s;
}

}  // namespace

TEST_CASE("dynamic loss scale: growth window, hysteresis, halving, floor", "[loss_scaler]") {
  LossScaler scaler(small_dynamic());
  CHECK(scaler.scale() == 8);
  // step:        0     1     2     3     4     5     6     7     8     9     10    11    12
  const std::vector<bool> overflow = {false, false, false, true, true, false, true, false, false, false, true, true, true};
  // The scale after each step:
  // 2: three clean steps -> 16 (hysteresis back to 2); 3: overflow spends hysteresis (16);
  // 4: none left -> 8; 6: hysteresis is not restored by a clean step -> 4; 9: three clean steps
  // since the overflow at 6 -> 8; 10: spends hysteresis; 11 -> 4; 12 -> 2, the floor.
  const std::vector<double> after = {8, 8, 16, 16, 8, 8, 4, 4, 4, 8, 8, 4, 2};
  for (size_t i = 0; i < overflow.size(); ++i) {
    INFO("step " << i);
    CHECK(scaler.update(overflow[i]) == overflow[i]);
    CHECK(scaler.scale() == after[i]);
  }
  CHECK(scaler.overflows() == 6);
  // At the floor with no hysteresis left, another overflow ends the run (raise_error_at_min_scale).
  CHECK_THROWS_AS(scaler.update(true), RunError);
}

TEST_CASE("static loss scale never changes, and its overflow steps are skipped", "[loss_scaler]") {
  LossScalerSettings s;
  s.static_scale = 128;
  LossScaler scaler(s);
  for (bool overflow : {false, true, true, true, false, false}) {
    CHECK(scaler.update(overflow) == overflow);
    CHECK(scaler.scale() == 128);
  }
}

TEST_CASE("GradScaler settings: no hysteresis, no floor", "[loss_scaler]") {
  LossScalerSettings s;
  s.initial_scale_power = 16;
  s.window = 2000;
  s.hysteresis = 1;
  s.min_scale = 0;
  LossScaler scaler(s);
  for (int i = 0; i < 20; ++i) scaler.update(true);  // halves every time, never throws
  CHECK(scaler.scale() == 65536.0 / (1 << 20));
  for (int i = 0; i < 1999; ++i) scaler.update(false);
  CHECK(scaler.scale() == 65536.0 / (1 << 20));
  scaler.update(false);  // the 2000th clean step
  CHECK(scaler.scale() == 65536.0 / (1 << 19));
}

TEST_CASE("loss scaler state round-trips through a checkpoint", "[loss_scaler]") {
  LossScaler a(small_dynamic());
  for (bool overflow : {false, true, false}) a.update(overflow);
  LossScaler b(small_dynamic());
  b.restore(a.state());
  for (bool overflow : {true, false, false, false, true, true}) {
    CHECK(a.update(overflow) == b.update(overflow));
    CHECK(a.scale() == b.scale());
  }
  CHECK(a.state() == b.state());
  CHECK_THROWS_AS(b.restore(nlohmann::json{{"scale", 2.0}}), RunError);
}
