// See chart_drawing.hpp.
#include "runtime/report/chart_drawing.hpp"

#include <cairo-svg.h>
#include <cairo.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>

#include "runtime/common/errors.hpp"
#include "runtime/common/safe_file.hpp"

namespace accel::report {
namespace {

constexpr const char* kFont = "DejaVu Sans";
const Color kInk{0.15, 0.15, 0.15};
const Color kMuted{0.42, 0.42, 0.42};
const Color kGrid{0.89, 0.89, 0.89};
constexpr double kTitleSize = 13.5, kTextSize = 11, kSmallSize = 10;
constexpr double kLegendRow = 16;

using Context = std::unique_ptr<cairo_t, decltype(&cairo_destroy)>;
using Surface = std::unique_ptr<cairo_surface_t, decltype(&cairo_surface_destroy)>;

void set_color(cairo_t* cr, const Color& c, double alpha = 1.0) { cairo_set_source_rgba(cr, c.r, c.g, c.b, alpha); }

void set_font(cairo_t* cr, double size, bool bold = false) {
  cairo_select_font_face(cr, kFont, CAIRO_FONT_SLANT_NORMAL, bold ? CAIRO_FONT_WEIGHT_BOLD : CAIRO_FONT_WEIGHT_NORMAL);
  cairo_set_font_size(cr, size);
}

double text_width(cairo_t* cr, const std::string& s) {
  cairo_text_extents_t e;
  cairo_text_extents(cr, s.c_str(), &e);
  return e.x_advance;
}

enum class Align { left, center, right };

void text(cairo_t* cr, double x, double y, const std::string& s, Align align = Align::left) {
  const double w = text_width(cr, s);
  cairo_move_to(cr, align == Align::left ? x : align == Align::center ? x - w / 2 : x - w, y);
  cairo_show_text(cr, s.c_str());
}

struct LegendEntry {
  std::string label;
  Color color;
  enum Kind { line, box, none } kind = line;
};

// Lays the entries out in rows from (x0, y0) within `width`; draws them when `draw`. Returns the rows.
int legend(cairo_t* cr, const std::vector<LegendEntry>& entries, double x0, double y0, double width, bool draw) {
  set_font(cr, kTextSize);
  double x = x0;
  int row = 0;
  for (const auto& e : entries) {
    const double w = (e.kind == LegendEntry::none ? 0 : 20) + text_width(cr, e.label) + 16;
    if (x > x0 && x + w > x0 + width) {
      x = x0;
      ++row;
    }
    const double y = y0 + row * kLegendRow;
    if (draw) {
      if (e.kind == LegendEntry::line) {
        set_color(cr, e.color);
        cairo_set_line_width(cr, 2.5);
        cairo_move_to(cr, x, y - 4);
        cairo_line_to(cr, x + 14, y - 4);
        cairo_stroke(cr);
      } else if (e.kind == LegendEntry::box) {
        set_color(cr, e.color);
        cairo_rectangle(cr, x + 2, y - 9, 10, 10);
        cairo_fill(cr);
      }
      set_color(cr, e.kind == LegendEntry::none ? kMuted : kInk);
      text(cr, x + (e.kind == LegendEntry::none ? 0 : 20), y, e.label);
    }
    x += w;
  }
  return entries.empty() ? 0 : row + 1;
}

// The frame with its top below the title and the legend's rows (measured on a scratch surface).
Frame laid_out(Frame f, const std::vector<LegendEntry>& entries) {
  Surface scratch(cairo_image_surface_create(CAIRO_FORMAT_ARGB32, 1, 1), cairo_surface_destroy);
  Context cr(cairo_create(scratch.get()), cairo_destroy);
  const int rows = legend(cr.get(), entries, f.left, 0, f.width - f.left - f.right, false);
  f.top = 30 + rows * kLegendRow + 10;
  return f;
}

double step_of(const Axis& a) { return a.ticks.size() > 1 ? a.ticks[1] - a.ticks[0] : a.max - a.min; }

struct Mapping {
  const Frame& f;
  const Axis* x;
  const Axis& y;
  double px(double v) const { return f.left + (v - x->min) / (x->max - x->min) * f.plot_w(); }
  double py(double v) const { return f.top + f.plot_h() - (v - y.min) / (y.max - y.min) * f.plot_h(); }
};

void draw_frame(cairo_t* cr, const Frame& f, const std::string& title, const std::vector<LegendEntry>& entries) {
  cairo_set_source_rgb(cr, 1, 1, 1);
  cairo_paint(cr);
  set_font(cr, kTitleSize, true);
  set_color(cr, kInk);
  text(cr, f.left, 20, title);
  legend(cr, entries, f.left, 30 + kLegendRow - 4, f.width - f.left - f.right, true);
}

// Grid, axis lines, ticks and labels; `m.x` null: no x ticks (bar charts).
void draw_axes(cairo_t* cr, const Mapping& m, const std::string& x_label, const std::string& y_label) {
  const Frame& f = m.f;
  const double bottom = f.top + f.plot_h(), right = f.left + f.plot_w();
  cairo_set_line_width(cr, 1);
  set_color(cr, kGrid);
  for (double t : m.y.ticks) {
    const double y = std::round(m.py(t)) + 0.5;
    cairo_move_to(cr, f.left, y);
    cairo_line_to(cr, right, y);
  }
  if (m.x)
    for (double t : m.x->ticks) {
      const double x = std::round(m.px(t)) + 0.5;
      cairo_move_to(cr, x, f.top);
      cairo_line_to(cr, x, bottom);
    }
  cairo_stroke(cr);
  set_color(cr, kMuted);
  cairo_move_to(cr, f.left + 0.5, f.top);
  cairo_line_to(cr, f.left + 0.5, bottom + 0.5);
  cairo_line_to(cr, right, bottom + 0.5);
  cairo_stroke(cr);

  set_font(cr, kSmallSize);
  for (double t : m.y.ticks) text(cr, f.left - 6, m.py(t) + 3.5, tick_label(t, step_of(m.y)), Align::right);
  if (m.x)
    for (double t : m.x->ticks) text(cr, m.px(t), bottom + 14, tick_label(t, step_of(*m.x)), Align::center);
  set_font(cr, kTextSize);
  set_color(cr, kInk);
  if (!x_label.empty()) text(cr, f.left + f.plot_w() / 2, f.height - 8, x_label, Align::center);
  cairo_save(cr);
  cairo_translate(cr, 14, f.top + f.plot_h() / 2);
  cairo_rotate(cr, -M_PI / 2);
  text(cr, 0, 0, y_label, Align::center);
  cairo_restore(cr);
}

std::vector<LegendEntry> line_legend(const LineChart& c) {
  std::vector<LegendEntry> entries;
  for (const auto& s : c.series) entries.push_back({s.name, s.color, LegendEntry::line});
  return entries;
}

// The categories some bar has (colours stay by position, so a category keeps its colour).
std::vector<LegendEntry> bar_legend(const BarChart& c) {
  std::vector<LegendEntry> entries;
  for (size_t i = 0; i < c.categories.size(); ++i) {
    bool used = false;
    for (const auto& g : c.groups)
      for (const auto& b : g.bars) used = used || (i < b.stack.size() && b.stack[i] > 0);
    if (used) entries.push_back({c.categories[i], category_color(int(i)), LegendEntry::box});
  }
  if (!c.legend_note.empty()) entries.push_back({c.legend_note, kMuted, LegendEntry::none});
  return entries;
}

void draw(cairo_t* cr, const LineChart& c, const Frame& f) {
  draw_frame(cr, f, c.title, line_legend(c));
  const Mapping m{f, &c.x, c.y};
  draw_axes(cr, m, c.x_label, c.y_label);
  cairo_save(cr);
  cairo_rectangle(cr, f.left, f.top - 4, f.plot_w() + 4, f.plot_h() + 8);  // markers on the edges stay whole
  cairo_clip(cr);
  cairo_set_line_join(cr, CAIRO_LINE_JOIN_ROUND);
  for (size_t k = 0; k < c.series.size(); ++k) {
    const Series s = thin_for_width(c.series[k], c.x, f.plot_w());
    set_color(cr, s.color);
    // Each run's line is thinner than the one before, so a run drawn over an equal one (the same
    // job under another backend) leaves the first one's colour showing along both edges.
    cairo_set_line_width(cr, std::max(1.2, 2.6 - 1.1 * double(k)));
    for (size_t i = 0; i < s.x.size(); ++i) {
      if (i == 0) cairo_move_to(cr, m.px(s.x[i]), m.py(s.y[i]));
      else cairo_line_to(cr, m.px(s.x[i]), m.py(s.y[i]));
    }
    cairo_stroke(cr);
    if (!s.markers) continue;
    for (size_t i = 0; i < s.x.size(); ++i) {
      cairo_new_sub_path(cr);
      cairo_arc(cr, m.px(s.x[i]), m.py(s.y[i]), 3.2, 0, 2 * M_PI);
    }
    cairo_fill(cr);
  }
  cairo_restore(cr);
}

void draw(cairo_t* cr, const BarChart& c, const Frame& f) {
  draw_frame(cr, f, c.title, bar_legend(c));
  const Mapping m{f, nullptr, c.y};
  draw_axes(cr, m, "", c.y_label);
  size_t bars = 0;
  for (const auto& g : c.groups) bars += g.bars.size();
  constexpr double kGroupGap = 0.7, kEdge = 0.4;  // in bar slots
  const double slots = double(bars) + kGroupGap * double(std::max<size_t>(1, c.groups.size()) - 1) + 2 * kEdge;
  const double slot = f.plot_w() / slots, width = std::min(slot * 0.78, 72.0);
  const double bottom = f.top + f.plot_h();
  double x = f.left + kEdge * slot;
  for (const auto& g : c.groups) {
    const double group_start = x;
    for (const auto& b : g.bars) {
      const double x0 = x + (slot - width) / 2;
      double level = 0;
      for (size_t k = 0; k < b.stack.size(); ++k) {
        if (b.stack[k] <= 0) continue;
        const double y0 = m.py(level), y1 = m.py(level + b.stack[k]);
        cairo_rectangle(cr, x0, y1, width, y0 - y1);
        set_color(cr, category_color(int(k)), b.light ? 0.3 : 1.0);
        if (b.light) {
          cairo_fill_preserve(cr);
          set_color(cr, category_color(int(k)));
          cairo_set_line_width(cr, 1);
          cairo_stroke(cr);
        } else {
          cairo_fill(cr);
        }
        level += b.stack[k];
      }
      set_font(cr, kSmallSize);
      set_color(cr, kInk);
      char total[32];
      std::snprintf(total, sizeof total, "%.3g", level);
      text(cr, x + slot / 2, m.py(level) - 4, total, Align::center);
      set_color(cr, kMuted);
      text(cr, x + slot / 2, bottom + 13, b.label, Align::center);
      x += slot;
    }
    set_font(cr, kTextSize, true);
    set_color(cr, g.color);
    text(cr, (group_start + x) / 2, bottom + 29, g.label, Align::center);
    x += kGroupGap * slot;
  }
}

cairo_status_t append_to_string(void* closure, const unsigned char* data, unsigned int length) {
  static_cast<std::string*>(closure)->append(reinterpret_cast<const char*>(data), length);
  return CAIRO_STATUS_SUCCESS;
}

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) s.replace(at, from.size(), to);
}

template <typename Chart>
Drawn svg_of(const Chart& chart, Frame frame, const std::vector<LegendEntry>& entries, const std::string& prefix) {
  Drawn d;
  d.frame = laid_out(frame, entries);
  std::string out;
  {
    Surface surface(cairo_svg_surface_create_for_stream(append_to_string, &out, d.frame.width, d.frame.height),
                    cairo_surface_destroy);
    cairo_svg_surface_set_document_unit(surface.get(), CAIRO_SVG_UNIT_PX);
    Context cr(cairo_create(surface.get()), cairo_destroy);
    draw(cr.get(), chart, d.frame);
    cr.reset();
    cairo_surface_finish(surface.get());
    if (cairo_surface_status(surface.get()) != CAIRO_STATUS_SUCCESS)
      throw RunError(std::string("accel report: drawing chart ") + chart.id + " failed: " +
                     cairo_status_to_string(cairo_surface_status(surface.get())));
  }
  // Inline in one page, the charts' ids (glyphs, clips) must not collide: each gets a prefix.
  const size_t svg_start = out.find("<svg");
  d.svg = svg_start == std::string::npos ? out : out.substr(svg_start);
  replace_all(d.svg, "id=\"", "id=\"" + prefix);
  replace_all(d.svg, "href=\"#", "href=\"#" + prefix);
  replace_all(d.svg, "url(#", "url(#" + prefix);
  return d;
}

template <typename Chart>
void png_of(const Chart& chart, Frame frame, const std::vector<LegendEntry>& entries, const std::string& path) {
  frame = laid_out(frame, entries);
  Surface surface(cairo_image_surface_create(CAIRO_FORMAT_ARGB32, frame.width, frame.height), cairo_surface_destroy);
  {
    Context cr(cairo_create(surface.get()), cairo_destroy);
    draw(cr.get(), chart, frame);
  }
  // Encoded in memory, then written as accel writes every file: replaced whole, never through a
  // link planted at its name (cairo's own writer would follow one; runtime/common/safe_file.hpp).
  std::string png;
  const cairo_status_t status = cairo_surface_write_to_png_stream(surface.get(), append_to_string, &png);
  if (status != CAIRO_STATUS_SUCCESS)
    throw RunError("accel report: cannot write " + path + ": " + cairo_status_to_string(status));
  try {
    files::write_file_replacing(path, png);
  } catch (const RunError& e) {
    throw RunError(std::string("accel report: ") + e.what());
  }
}

}  // namespace

Drawn draw_svg(const LineChart& chart, Frame frame, const std::string& id_prefix) {
  return svg_of(chart, frame, line_legend(chart), id_prefix);
}
Drawn draw_svg(const BarChart& chart, Frame frame, const std::string& id_prefix) {
  return svg_of(chart, frame, bar_legend(chart), id_prefix);
}
void draw_png(const LineChart& chart, Frame frame, const std::string& path) {
  png_of(chart, frame, line_legend(chart), path);
}
void draw_png(const BarChart& chart, Frame frame, const std::string& path) {
  png_of(chart, frame, bar_legend(chart), path);
}

}  // namespace accel::report
