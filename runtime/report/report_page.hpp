// `accel report RUN_DIR [RUN_DIR...] [-o OUT_DIR]`: one self-contained HTML page (the charts
// inlined as SVG, the styles in the page; nothing fetched) and a PNG per chart, for one run or
// several overlaid. Design: docs/design/0026-run-report.md. Torch-free.
// Invariant: the page and the PNGs come from the same drawing; every figure states its source
// file, and its facts (series, axis ranges, plot area) are data-* attributes a test can read.
#pragma once

#include <string>
#include <vector>

#include "runtime/report/report_figures.hpp"
#include "runtime/report/run_data.hpp"

namespace accel::report {

struct ReportRequest {
  std::vector<std::string> run_dirs;
  std::string out_dir;  // empty: <run_dir>/report for one run; required for several
  std::string command;  // the command line, quoted on the page
};

struct ReportResult {
  std::string out_dir;
  std::string html;              // <out_dir>/report.html
  std::vector<std::string> pngs;  // one per drawn figure
  std::vector<std::string> notes;
};

// Reads every run first (UsageError naming the file on bad input, nothing written), then writes.
ReportResult write_report(const ReportRequest& request);

// The page itself, from read runs and built figures (the drawings are made here).
std::string render_page(const std::vector<RunData>& runs, const std::vector<Figure>& figures,
                        const std::string& command);

}  // namespace accel::report
