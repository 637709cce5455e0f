// See report_page.hpp.
#include "runtime/report/report_page.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <sstream>

#include "runtime/common/errors.hpp"
#include "runtime/common/human_bytes.hpp"
#include "runtime/common/safe_file.hpp"
#include "runtime/report/chart_drawing.hpp"

namespace accel::report {
namespace fs = std::filesystem;
namespace {

constexpr const char* kPageName = "report.html";

const Frame kFrame{};  // every chart's size: 640 x 340 px

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string num(double v, const char* format = "%.6g") {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

std::vector<double> values(const RunData& run, const std::string& field) {
  std::vector<double> out;
  for (const auto& [x, y] : run.series(field)) out.push_back(y);
  return out;
}

std::string last_value(const RunData& run, const std::string& field, const char* format) {
  const auto s = run.series(field);
  return s.empty() ? "none" : num(s.back().second, format);
}

const char* kStyle = R"(
body { font-family: "DejaVu Sans", Verdana, sans-serif; color: #262626; margin: 24px; max-width: 1400px; }
h1 { font-size: 22px; margin: 0 0 4px 0; }
p.sub { color: #666; margin: 0 0 16px 0; font-size: 13px; }
table { border-collapse: collapse; font-size: 13px; margin-bottom: 8px; }
th, td { border-bottom: 1px solid #ddd; padding: 4px 8px; text-align: right; white-space: nowrap; }
th { background: #f4f4f4; white-space: normal; vertical-align: bottom; }
div.table { overflow-x: auto; }
td.name, th.name { text-align: left; }
span.swatch { display: inline-block; width: 11px; height: 11px; margin-right: 6px; vertical-align: -1px; }
ul.notes { font-size: 12.5px; color: #555; margin: 4px 0 16px 0; }
section.charts { display: grid; grid-template-columns: repeat(auto-fill, minmax(560px, 1fr)); gap: 16px; }
figure { margin: 0; border: 1px solid #e2e2e2; border-radius: 4px; padding: 8px; background: #fff; }
figure svg { width: 100%; height: auto; display: block; }
figcaption { font-size: 12px; color: #555; margin-top: 4px; }
figcaption ul { margin: 4px 0 0 0; padding-left: 18px; }
div.empty { font-size: 13px; color: #777; padding: 24px 8px; }
footer { font-size: 12px; color: #777; margin-top: 20px; }
code { background: #f4f4f4; padding: 1px 4px; }
)";

void summary_table(std::ostringstream& h, const std::vector<RunData>& runs) {
  h << "<div class=\"table\"><table class=\"runs\"><tr><th class=\"name\">run</th><th class=\"name\">strategy</th><th>world</th>"
       "<th>precision</th><th>steps</th><th>final loss</th><th>final eval loss</th><th>median tokens/s</th>"
       "<th>median step time</th><th>peak memory</th><th>bus bytes / step</th><th>wall time</th></tr>\n";
  for (size_t i = 0; i < runs.size(); ++i) {
    const RunData& r = runs[i];
    const nlohmann::json rank0 = r.rank_reports.empty() ? nlohmann::json::object() : r.rank_reports[0];
    const std::vector<double> peaks = values(r, "peak_mem_bytes");
    const double peak = peaks.empty() ? 0 : *std::max_element(peaks.begin(), peaks.end());
    const int world = r.job ? r.job->num_processes : rank0.value("world_size", 0);
    h << "<tr><td class=\"name\"><span class=\"swatch\" style=\"background:" << run_color(int(i)).hex() << "\"></span>"
      << escape(r.label) << "</td><td class=\"name\">" << escape(r.strategy) << "</td><td>"
      << (world > 0 ? std::to_string(world) : "?") << "</td><td>"
      << (!r.job ? "?" : r.job->mixed_precision == config::MixedPrecision::no ? "fp32" : config::to_string(r.job->mixed_precision)) << "</td><td>" << r.records.size()
      << "</td><td>" << last_value(r, "loss", "%.4f") << "</td><td>" << last_value(r, "eval_loss", "%.4f")
      << "</td><td>" << (r.has("tokens_per_s") ? num(median(values(r, "tokens_per_s")), "%.0f") : "none")
      << "</td><td>" << (r.has("step_time_s") ? num(median(values(r, "step_time_s")) * 1e3, "%.1f ms") : "none")
      << "</td><td>" << (peak > 0 ? escape(human_bytes(peak)) : "none") << "</td><td>"
      << (rank0.contains("comm_per_step") ? escape(human_bytes(rank0["comm_per_step"].value("bus_bytes", 0.0))) : "none")
      << "</td><td>"
      << (rank0.contains("time_s") ? num(rank0["time_s"].value("total", 0.0), "%.1f s") : "none") << "</td></tr>\n";
  }
  h << "</table></div>\n";
  std::vector<std::string> notes;
  for (const auto& r : runs) {
    notes.push_back(escape(r.label) + ": <code>" + escape(r.dir) + "</code>");
    for (const auto& n : r.notes) notes.push_back(escape(r.label) + ": " + escape(n));
  }
  h << "<ul class=\"notes\">";
  for (const auto& n : notes) h << "<li>" << n << "</li>";
  h << "</ul>\n";
}

void figure_html(std::ostringstream& h, const Figure& f) {
  h << "<figure class=\"chart\" id=\"chart-" << f.id << "\"";
  if (f.line) {
    const Drawn d = draw_svg(*f.line, kFrame, f.id + "-");
    h << " data-kind=\"line\" data-series=\"" << f.line->series.size() << "\" data-points=\"";
    for (size_t i = 0; i < f.line->series.size(); ++i) h << (i ? " " : "") << f.line->series[i].x.size();
    h << "\" data-x-min=\"" << num(f.line->x.min, "%.17g") << "\" data-x-max=\"" << num(f.line->x.max, "%.17g")
      << "\" data-y-min=\"" << num(f.line->y.min, "%.17g") << "\" data-y-max=\"" << num(f.line->y.max, "%.17g")
      << "\" data-y-label=\"" << escape(f.line->y_label) << "\" data-plot=\"" << d.frame.left << " " << d.frame.top
      << " " << d.frame.plot_w() << " " << d.frame.plot_h() << "\" data-size=\"" << d.frame.width << " "
      << d.frame.height << "\" data-png=\"" << f.id << ".png\">\n"
      << d.svg;
  } else if (f.bar) {
    const Drawn d = draw_svg(*f.bar, kFrame, f.id + "-");
    size_t bars = 0;
    for (const auto& g : f.bar->groups) bars += g.bars.size();
    h << " data-kind=\"bar\" data-groups=\"" << f.bar->groups.size() << "\" data-bars=\"" << bars
      << "\" data-categories=\"" << f.bar->categories.size() << "\" data-y-min=\"0\" data-y-max=\""
      << num(f.bar->y.max, "%.17g") << "\" data-y-label=\"" << escape(f.bar->y_label) << "\" data-size=\""
      << d.frame.width << " " << d.frame.height << "\" data-png=\"" << f.id << ".png\">\n"
      << d.svg;
  } else {
    h << " data-kind=\"none\">\n<div class=\"empty\"><b>" << escape(f.title) << "</b>: nothing to draw.</div>";
  }
  h << "\n<figcaption>" << escape(f.caption);
  if (!f.notes.empty()) {
    h << "<ul class=\"notes\">";
    for (const auto& n : f.notes) h << "<li>" << escape(n) << "</li>";
    h << "</ul>";
  }
  h << "</figcaption></figure>\n";
}

// Replaced whole (staged beside under a fresh name, renamed), never through a link planted at
// its name or the staged one (runtime/common/safe_file.hpp).
void write_file(const fs::path& path, const std::string& text) {
  try {
    files::write_file_replacing(path.string(), text);
  } catch (const RunError& e) {
    throw RunError(std::string("accel report: ") + e.what());
  }
}

}  // namespace

std::string render_page(const std::vector<RunData>& runs, const std::vector<Figure>& figures,
                        const std::string& command) {
  std::ostringstream h;
  std::string names;
  for (const auto& r : runs) names += (names.empty() ? "" : ", ") + r.label;
  h << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>accel report: " << escape(names)
    << "</title>\n<style>" << kStyle << "</style>\n</head>\n<body>\n<h1>accel report</h1>\n<p class=\"sub\">"
    << runs.size() << (runs.size() == 1 ? " run" : " runs, one colour each") << ": " << escape(names)
    << ". Written by <code>" << escape(command) << "</code>; every figure is also a PNG beside this page.</p>\n";
  summary_table(h, runs);
  h << "<section class=\"charts\">\n";
  for (const auto& f : figures) figure_html(h, f);
  h << "</section>\n<footer>The step axis counts steps as the console does, from 1 (metrics.jsonl's 0-based \"step\" + 1). Figures: ";
  for (size_t i = 0; i < figures.size(); ++i)
    h << (i ? ", " : "") << (figures[i].drawn() ? "<code>" + figures[i].id + ".png</code>" : figures[i].id + " (none)");
  h << ".</footer>\n</body>\n</html>\n";
  return h.str();
}

ReportResult write_report(const ReportRequest& request) {
  if (request.run_dirs.empty()) throw UsageError("accel report: give at least one run directory");
  if (request.run_dirs.size() > 1 && request.out_dir.empty())
    throw UsageError("accel report: " + std::to_string(request.run_dirs.size()) +
                     " runs are compared: say where the page goes with -o OUT_DIR (one run's page goes to "
                     "<run_dir>/report/ by default)");
  std::vector<RunData> runs;
  for (const auto& dir : request.run_dirs) runs.push_back(read_run(dir));
  label_runs(runs);
  const std::vector<Figure> figures = build_figures(runs);

  ReportResult result;
  result.out_dir = request.out_dir.empty() ? (fs::path(request.run_dirs[0]) / "report").string() : request.out_dir;
  std::error_code ec;
  fs::create_directories(result.out_dir, ec);
  if (ec || !fs::is_directory(result.out_dir))
    throw UsageError("accel report: cannot create the output directory " + result.out_dir + ": " +
                     (ec ? ec.message() : "a file is in the way") + "; choose another with -o");
  const std::string page = render_page(runs, figures, request.command);
  for (const auto& f : figures) {
    if (!f.drawn()) continue;
    const std::string png = (fs::path(result.out_dir) / (f.id + ".png")).string();
    if (f.line) draw_png(*f.line, kFrame, png);
    else draw_png(*f.bar, kFrame, png);
    result.pngs.push_back(png);
  }
  result.html = (fs::path(result.out_dir) / kPageName).string();
  write_file(result.html, page);
  for (const auto& r : runs)
    for (const auto& n : r.notes) result.notes.push_back(r.label + ": " + n);
  for (const auto& f : figures)
    for (const auto& n : f.notes) result.notes.push_back(f.title + ": " + n);
  return result;
}

}  // namespace accel::report
