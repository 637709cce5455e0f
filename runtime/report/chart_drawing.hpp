// Draws the report's charts with cairo, once for both outputs: an SVG surface (the page inlines
// the text) and an image surface (the PNG files). One drawing code, so the two cannot differ.
// Fonts: DejaVu Sans through fontconfig; the SVG carries its glyphs as paths, so the page needs no
// font of its own. Torch-free; only accel-report links cairo (docs/design/0026).
#pragma once

#include <string>

#include "runtime/report/chart.hpp"

namespace accel::report {

struct Drawn {
  std::string svg;  // a complete <svg> element (no XML prologue), ids unique to `id_prefix`
  Frame frame;      // where the plot area ended up (the legend's rows decide its top)
};

Drawn draw_svg(const LineChart& chart, Frame frame, const std::string& id_prefix);
Drawn draw_svg(const BarChart& chart, Frame frame, const std::string& id_prefix);

// Writes the same drawing as a PNG of frame.width x frame.height pixels; RunError on failure.
void draw_png(const LineChart& chart, Frame frame, const std::string& path);
void draw_png(const BarChart& chart, Frame frame, const std::string& path);

}  // namespace accel::report
