// The charts of `accel report`, as data: line charts (a series per run over the steps) and bar
// charts (groups of stacked bars), their axes and layout. Pure: chart_drawing draws them with
// cairo, the page writes their facts beside them (the test reads those).
// Invariant: an axis always contains the data it shows (nice_axis), and a line chart's x axis is
// exactly the steps' range, so the first and last records sit on the plot's edges.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace accel::report {

struct Color {
  double r = 0, g = 0, b = 0;  // 0..1
  std::string hex() const;     // "#4e79a7"
};

// The runs' colours (Tableau 10), in run order, and the stacked categories' colours.
Color run_color(int run);
Color category_color(int category);

struct Axis {
  double min = 0, max = 1;  // the range drawn
  std::vector<double> ticks;
};

// Ticks at 1, 2, 2.5 or 5 times a power of ten, about `target` of them, with min/max rounded out
// to ticks so the range holds [lo, hi]. A flat range (lo == hi) is widened around its value.
Axis nice_axis(double lo, double hi, int target = 5);
// The x axis of steps: exactly [lo, hi] (lo == hi: lo +- 1), with nice ticks inside it.
Axis step_axis(double lo, double hi, int target = 6);

// "0.25", "1.5k", "3e-04": short labels for ticks `step` apart.
std::string tick_label(double value, double step);

struct Series {
  std::string name;
  Color color;
  std::vector<double> x, y;
  bool markers = false;  // sparse series (evaluation): a dot at each point
};

struct LineChart {
  std::string id;  // "loss": the PNG's name and the figure's id
  std::string title, x_label, y_label;
  std::vector<Series> series;
  Axis x, y;  // set by finish_axes()
  void finish_axes();
};

struct Bar {
  std::string label;           // under the bar
  std::vector<double> stack;   // one value per category, bottom up
  bool light = false;          // drawn pale with an outline (an estimate beside a measurement)
};

struct BarGroup {
  std::string label;  // under the group
  Color color;        // the label's colour (the run's)
  std::vector<Bar> bars;
};

struct BarChart {
  std::string id, title, y_label;
  std::vector<std::string> categories;  // the stack's parts, bottom up, in the legend
  std::vector<BarGroup> groups;
  std::string legend_note;  // "pale: accel estimate-memory"
  Axis y;  // set by finish_axes(): from 0 to the tallest stack
  void finish_axes();
};

// Pixel layout shared by drawing and the page's facts.
struct Frame {
  int width = 640, height = 340;
  double left = 64, right = 16, top = 34, bottom = 46;  // margins around the plot area
  double plot_w() const { return width - left - right; }
  double plot_h() const { return height - top - bottom; }
};

// Series with more points than two per pixel column keep each column's first, lowest, highest and
// last point, in order: the same picture, a bounded drawing.
Series thin_for_width(const Series& s, const Axis& x, double plot_width);

}  // namespace accel::report
