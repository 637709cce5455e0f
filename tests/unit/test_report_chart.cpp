// `accel report`'s chart arithmetic (runtime/report/chart.hpp): axes that hold their data, tick
// labels, thinning of long series, byte units.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "runtime/report/chart.hpp"
#include "runtime/report/report_figures.hpp"

using namespace accel::report;

TEST_CASE("report chart: a nice axis holds its data, ticks at 1/2/2.5/5 x 10^k on its ends") {
  const Axis a = nice_axis(2.7812, 5.6013);
  CHECK(a.min <= 2.7812);
  CHECK(a.max >= 5.6013);
  CHECK(a.min == 2.0);  // at most about 5 ticks: a step of 1
  CHECK(a.max == 6.0);
  REQUIRE(a.ticks.size() >= 2);
  CHECK(a.ticks.front() == a.min);
  CHECK(std::abs(a.ticks.back() - a.max) < 1e-12);
  const double step = a.ticks[1] - a.ticks[0];
  CHECK(std::abs(step - 1.0) < 1e-12);

  const Axis lr = nice_axis(1e-4, 1e-3);
  CHECK(lr.min == 0);
  CHECK(std::abs(lr.max - 1e-3) < 1e-15);

  const Axis flat = nice_axis(7, 7);  // a flat series still gets a band around it
  CHECK(flat.min < 7);
  CHECK(flat.max > 7);
}

TEST_CASE("report chart: the step axis is exactly the records' range") {
  const Axis x = step_axis(0, 149);
  CHECK(x.min == 0);
  CHECK(x.max == 149);
  CHECK(x.ticks == std::vector<double>{0, 25, 50, 75, 100, 125});
  const Axis one = step_axis(5, 5);
  CHECK(one.min < 5);
  CHECK(one.max > 5);
}

TEST_CASE("report chart: tick labels tell their ticks apart, briefly") {
  CHECK(tick_label(0.25, 0.25) == "0.25");
  CHECK(tick_label(0.5, 0.5) == "0.5");
  CHECK(tick_label(3, 0.5) == "3.0");
  CHECK(tick_label(50, 25) == "50");
  CHECK(tick_label(0, 0.1) == "0");
  CHECK(tick_label(20000, 5000) == "20k");
  CHECK(tick_label(5000, 5000) == "5k");  // as its neighbours on the axis
  CHECK(tick_label(12500, 2500) == "12.5k");
  CHECK(tick_label(0.0004, 0.0002) == "0.0004");
}

TEST_CASE("report chart: a long series keeps each pixel column's first, lowest, highest and last point") {
  Series s;
  for (int i = 0; i < 10000; ++i) {
    s.x.push_back(i);
    s.y.push_back(i % 7 == 0 ? -1.0 : (i % 11 == 0 ? 5.0 : 1.0));
  }
  const Axis x = step_axis(0, 9999);
  const Series thin = thin_for_width(s, x, 100);
  CHECK(thin.x.size() <= 400);
  CHECK(thin.x.front() == 0);
  CHECK(thin.x.back() == 9999);
  double lo = 1e9, hi = -1e9;
  for (double v : thin.y) lo = std::min(lo, v), hi = std::max(hi, v);
  CHECK(lo == -1.0);  // the extremes survive
  CHECK(hi == 5.0);
  for (size_t i = 1; i < thin.x.size(); ++i) CHECK(thin.x[i] > thin.x[i - 1]);  // in order
  Series short_one;
  short_one.x = {0, 1, 2};
  short_one.y = {3, 2, 1};
  CHECK(thin_for_width(short_one, step_axis(0, 2), 100).x.size() == 3);  // short series stay whole
}

TEST_CASE("report chart: byte axes pick their binary unit") {
  CHECK(byte_unit(512).name == "B");
  CHECK(byte_unit(7 << 20).name == "MiB");
  CHECK(byte_unit(7 << 20).bytes == double(1 << 20));
  CHECK(byte_unit(3.5 * (1ull << 30)).name == "GiB");
}
