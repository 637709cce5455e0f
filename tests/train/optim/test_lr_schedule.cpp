// The learning-rate schedule at hand-computed points: warmup start and end, cosine start, quarter,
// midpoint and end (= lr_min), past the end, constant, no warmup, a run no longer than its warmup.
#include <catch2/catch.hpp>

#include <cmath>
#include <stdexcept>

#include "trainer/lr_schedule.hpp"

using accel::train::learning_rate;
using accel::config::SchedulerName;
using accel::config::SchedulerSection;

namespace {

SchedulerSection sched(SchedulerName name, int warmup, double min_lr_ratio) {
  SchedulerSection s;
  s.name = name;
  s.warmup_steps = warmup;
  s.min_lr_ratio = min_lr_ratio;
  return s;
}

// Values below are computed by hand; 1e-12 relative covers the last-bit rounding of cos().
Approx near(double v) { return Approx(v).epsilon(1e-12).margin(0); }

}  // namespace

TEST_CASE("lr schedule: cosine with warmup at hand-computed points", "[optim][schedule]") {
  const auto s = sched(SchedulerName::cosine, 10, 0.1);
  const double lr = 6e-4;  // lr_min = 6e-5; decay span S - W_u = 100
  CHECK(learning_rate(s, lr, 0, 110) == near(6e-5));   // warmup start: lr * 1/10
  CHECK(learning_rate(s, lr, 4, 110) == near(3e-4));   // lr * 5/10
  CHECK(learning_rate(s, lr, 9, 110) == near(6e-4));   // warmup end: lr * 10/10
  CHECK(learning_rate(s, lr, 10, 110) == near(6e-4));  // cosine start, p = 0
  // p = 0.25: 6e-5 + 0.5 * (1 + cos(pi/4)) * 5.4e-4 = 6e-5 + 0.8535533905932737 * 5.4e-4
  CHECK(learning_rate(s, lr, 35, 110) == near(6e-5 + 0.8535533905932737 * 5.4e-4));
  CHECK(learning_rate(s, lr, 60, 110) == near(3.3e-4));  // midpoint: lr_min + (lr - lr_min)/2
  CHECK(learning_rate(s, lr, 110, 110) == near(6e-5));   // p = 1: lr_min
  CHECK(learning_rate(s, lr, 500, 110) == near(6e-5));   // past the end: stays at lr_min
}

TEST_CASE("lr schedule: non-increasing after warmup, never below lr_min", "[optim][schedule]") {
  const auto s = sched(SchedulerName::cosine, 5, 0.2);
  double prev = learning_rate(s, 1.0, 5, 60);
  for (int64_t step = 6; step <= 70; ++step) {
    const double now = learning_rate(s, 1.0, step, 60);
    CHECK(now <= prev);
    CHECK(now >= 0.2 - 1e-15);
    prev = now;
  }
}

TEST_CASE("lr schedule: constant keeps lr after warmup", "[optim][schedule]") {
  const auto s = sched(SchedulerName::constant, 4, 0.1);
  CHECK(learning_rate(s, 1e-3, 0, 100) == near(2.5e-4));
  CHECK(learning_rate(s, 1e-3, 3, 100) == near(1e-3));
  CHECK(learning_rate(s, 1e-3, 4, 100) == near(1e-3));
  CHECK(learning_rate(s, 1e-3, 99, 100) == near(1e-3));
  CHECK(learning_rate(s, 1e-3, 1000, 100) == near(1e-3));
}

TEST_CASE("lr schedule: warmup 0 starts at the peak", "[optim][schedule]") {
  const auto cos = sched(SchedulerName::cosine, 0, 0.0);
  CHECK(learning_rate(cos, 2.0, 0, 100) == near(2.0));
  CHECK(learning_rate(cos, 2.0, 50, 100) == near(1.0));  // midpoint with lr_min = 0
  CHECK(learning_rate(cos, 2.0, 100, 100) == Approx(0.0).margin(1e-15));
  const auto constant = sched(SchedulerName::constant, 0, 0.1);
  CHECK(learning_rate(constant, 2.0, 0, 100) == near(2.0));
}

TEST_CASE("lr schedule: a run no longer than its warmup", "[optim][schedule]") {
  // S - W_u <= 0: max(1, S - W_u) = 1 keeps p finite; warmup still counts up to the peak.
  const auto s = sched(SchedulerName::cosine, 10, 0.1);
  CHECK(learning_rate(s, 1.0, 2, 5) == near(0.3));
  CHECK(learning_rate(s, 1.0, 10, 10) == near(1.0));  // p = 0
  CHECK(learning_rate(s, 1.0, 11, 10) == near(0.1));  // p clamped to 1
}

TEST_CASE("lr schedule: negative arguments are rejected", "[optim][schedule]") {
  const auto s = sched(SchedulerName::cosine, 10, 0.1);
  CHECK_THROWS_AS(learning_rate(s, 1.0, -1, 10), std::invalid_argument);
  CHECK_THROWS_AS(learning_rate(s, 1.0, 0, -1), std::invalid_argument);
  CHECK_THROWS_AS(learning_rate(sched(SchedulerName::cosine, -1, 0.1), 1.0, 0, 10), std::invalid_argument);
}
