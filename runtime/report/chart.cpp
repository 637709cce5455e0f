// See chart.hpp.
#include "runtime/report/chart.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

namespace accel::report {
namespace {

Color from_hex(unsigned rgb) {
  return {((rgb >> 16) & 0xff) / 255.0, ((rgb >> 8) & 0xff) / 255.0, (rgb & 0xff) / 255.0};
}

// 1, 2, 2.5, 5 x 10^k: the smallest at least `raw`.
double nice_step(double raw) {
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0})
    if (m * power >= raw * (1 - 1e-9)) return m * power;
  return 10 * power;
}

std::vector<double> ticks_between(double lo, double hi, double step) {
  std::vector<double> ticks;
  for (double t = std::ceil(lo / step - 1e-9) * step; t <= hi + step * 1e-9; t += step)
    ticks.push_back(std::abs(t) < step * 1e-9 ? 0.0 : t);
  return ticks;
}

}  // namespace

std::string Color::hex() const {
  char buf[8];
  std::snprintf(buf, sizeof buf, "#%02x%02x%02x", int(std::lround(r * 255)), int(std::lround(g * 255)),
                int(std::lround(b * 255)));
  return buf;
}

Color run_color(int run) {
  static const unsigned palette[] = {0x4e79a7, 0xf28e2b, 0x59a14f, 0xe15759, 0xb07aa1,
                                     0x76b7b2, 0xedc948, 0xff9da7, 0x9c755f, 0xbab0ac};
  return from_hex(palette[run % 10]);
}

Color category_color(int category) {
  static const unsigned palette[] = {0x1f77b4, 0xff7f0e, 0x2ca02c, 0xd62728, 0x9467bd,
                                     0x8c564b, 0xe377c2, 0x7f7f7f, 0xbcbd22, 0x17becf};
  return from_hex(palette[category % 10]);
}

Axis nice_axis(double lo, double hi, int target) {
  if (!std::isfinite(lo) || !std::isfinite(hi)) lo = 0, hi = 1;
  if (lo > hi) std::swap(lo, hi);
  if (hi - lo <= std::abs(hi) * 1e-12) {  // flat: a band around the value
    const double pad = hi == 0 ? 1.0 : std::abs(hi) * 0.1;
    lo -= pad;
    hi += pad;
  }
  const double step = nice_step((hi - lo) / std::max(1, target));
  Axis a;
  a.min = std::floor(lo / step + 1e-9) * step;
  a.max = std::ceil(hi / step - 1e-9) * step;
  a.ticks = ticks_between(a.min, a.max, step);
  return a;
}

Axis step_axis(double lo, double hi, int target) {
  if (hi <= lo) {
    lo -= 1;
    hi = lo + 2;
  }
  Axis a;
  a.min = lo;
  a.max = hi;
  a.ticks = ticks_between(lo, hi, std::max(1.0, nice_step((hi - lo) / std::max(1, target))));
  return a;
}

std::string tick_label(double value, double step) {
  if (std::abs(value) < step * 1e-9) return "0";
  char buf[32];
  if (std::max(std::abs(value), step) < 1e-3) {
    std::snprintf(buf, sizeof buf, "%.2g", value);
    return buf;
  }
  const bool thousands = step >= 1000;  // every tick of the axis alike: 5k, 10k, 15k
  if (thousands) value /= 1e3, step /= 1e3;
  // As many decimals as tell ticks `step` apart: 0.1 -> 1, 0.25 -> 2, 50 -> 0.
  int decimals = std::max(0, int(-std::floor(std::log10(step) + 1e-9)));
  const double scaled = step * std::pow(10.0, decimals);
  if (std::abs(scaled - std::round(scaled)) > 1e-6) ++decimals;
  std::snprintf(buf, sizeof buf, "%.*f%s", decimals, value, thousands ? "k" : "");
  return buf;
}

void LineChart::finish_axes() {
  double x0 = std::numeric_limits<double>::infinity(), x1 = -x0, y0 = x0, y1 = -x0;
  for (const auto& s : series) {
    for (double v : s.x) x0 = std::min(x0, v), x1 = std::max(x1, v);
    for (double v : s.y)
      if (std::isfinite(v)) y0 = std::min(y0, v), y1 = std::max(y1, v);
  }
  x = step_axis(std::isfinite(x0) ? x0 : 0, std::isfinite(x1) ? x1 : 1);
  y = nice_axis(std::isfinite(y0) ? y0 : 0, std::isfinite(y1) ? y1 : 1);
}

void BarChart::finish_axes() {
  double top = 0;
  for (const auto& g : groups)
    for (const auto& b : g.bars) {
      double sum = 0;
      for (double v : b.stack) sum += v;
      top = std::max(top, sum);
    }
  y = nice_axis(0, top > 0 ? top : 1);
}

Series thin_for_width(const Series& s, const Axis& x, double plot_width) {
  const int columns = std::max(1, int(plot_width));
  if (s.x.size() <= size_t(2 * columns) || x.max <= x.min) return s;
  Series out = s;
  out.x.clear();
  out.y.clear();
  size_t i = 0;
  while (i < s.x.size()) {
    const int col = int((s.x[i] - x.min) / (x.max - x.min) * (columns - 1));
    size_t j = i, lo = i, hi = i;
    while (j < s.x.size() && int((s.x[j] - x.min) / (x.max - x.min) * (columns - 1)) == col) {
      if (s.y[j] < s.y[lo]) lo = j;
      if (s.y[j] > s.y[hi]) hi = j;
      ++j;
    }
    std::vector<size_t> keep = {i, lo, hi, j - 1};
    std::sort(keep.begin(), keep.end());
    keep.erase(std::unique(keep.begin(), keep.end()), keep.end());
    for (size_t k : keep) {
      out.x.push_back(s.x[k]);
      out.y.push_back(s.y[k]);
    }
    i = j;
  }
  return out;
}

}  // namespace accel::report
