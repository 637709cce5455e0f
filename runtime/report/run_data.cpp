// See run_data.hpp.
#include "runtime/report/run_data.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "runtime/common/errors.hpp"
#include "runtime/config/job_loader.hpp"

namespace accel::report {
namespace fs = std::filesystem;
namespace {

constexpr const char* kMetricsFile = "metrics.jsonl";
constexpr const char* kJobFile = "job.resolved.yaml";

// What `accel report` needs of a run directory, for every error about one.
std::string run_dir_fix(const std::string& dir) {
  return "give the output_dir of a run (training.output_dir; `accel launch` writes " + std::string(kMetricsFile) +
         " there), e.g. `accel report runs/quickstart`; " + dir;
}

std::vector<StepRecord> read_metrics(const std::string& dir, std::vector<std::string>& notes) {
  const fs::path path = fs::path(dir) / kMetricsFile;
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw UsageError("accel report: " + dir + " is not a directory; " + run_dir_fix("nothing was written"));
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw UsageError("accel report: " + path.string() + " does not exist or cannot be read; " +
                     run_dir_fix("a run writes it from its first step on"));
  std::stringstream text;
  text << in.rdbuf();
  const std::string all = text.str();
  std::vector<StepRecord> records;
  size_t pos = 0;
  int line_no = 0;
  while (pos < all.size()) {
    const size_t nl = all.find('\n', pos);
    const bool last_unterminated = nl == std::string::npos;
    const std::string line = all.substr(pos, last_unterminated ? std::string::npos : nl - pos);
    pos = last_unterminated ? all.size() : nl + 1;
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    std::string why;
    if (j.is_discarded()) why = "not JSON";
    else if (!j.is_object()) why = "not a JSON object";
    else if (!j.contains("step") || !j["step"].is_number_integer()) why = "no integer \"step\"";
    if (!why.empty()) {
      if (last_unterminated && j.is_discarded()) {  // cut short by a run still writing or stopped
        notes.push_back(std::string(kMetricsFile) + ": its last line (line " + std::to_string(line_no) +
                        ") is incomplete and was left out (a run still writing, or one stopped mid-line)");
        break;
      }
      throw UsageError("accel report: " + path.string() + ":" + std::to_string(line_no) + ": " + why +
                       " (each line must be a JSON object with a \"step\", as accel writes it); fix or remove "
                       "that line, or rerun the job");
    }
    StepRecord r;
    r.step = j["step"].get<int64_t>();
    for (const auto& [key, value] : j.items())
      if (key != "step" && value.is_number()) r.values[key] = value.get<double>();
    records.push_back(std::move(r));
  }
  if (records.empty())
    throw UsageError("accel report: " + path.string() + " has no records (the run stopped before its first step?); " +
                     "nothing to draw");
  return records;
}

std::vector<nlohmann::json> read_rank_reports(const std::string& dir, std::vector<std::string>& notes) {
  std::vector<nlohmann::json> reports;
  const fs::path report_dir = fs::path(dir) / "report";
  for (int r = 0;; ++r) {
    const fs::path path = report_dir / ("rank_" + std::to_string(r) + ".json");
    std::ifstream in(path);
    if (!in) break;
    const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object() || !j.contains("memory") || !j["memory"].is_object())
      throw UsageError("accel report: " + path.string() +
                       " is not a run report (a JSON object with \"memory\", as the trainer writes at the end of a "
                       "run); remove it, or rerun the job to write it again");
    reports.push_back(j);
  }
  if (reports.empty())
    notes.push_back("no run report (report/rank_<r>.json: the trainer writes it when a run ends; a run stopped "
                    "early or a program of your own has none): no memory, communication or time figures");
  return reports;
}

std::string last_path_parts(const fs::path& p, int parts) {
  std::vector<std::string> names;
  for (const auto& part : p) {
    const std::string s = part.string();
    if (!s.empty() && s != "/" && s != ".") names.push_back(s);
  }
  std::string label;
  for (int i = std::max(0, int(names.size()) - parts); i < int(names.size()); ++i)
    label += (label.empty() ? "" : "/") + names[i];
  return label.empty() ? p.string() : label;
}

}  // namespace

std::vector<std::pair<double, double>> RunData::series(const std::string& field) const {
  std::vector<std::pair<double, double>> out;
  for (const auto& r : records) {
    auto it = r.values.find(field);
    // Step n as the console prints it ("step 150/150"): metrics.jsonl's step is the 0-based index.
    if (it != r.values.end()) out.emplace_back(double(r.step + 1), it->second);
  }
  return out;
}

bool RunData::has(const std::string& field) const {
  return std::any_of(records.begin(), records.end(), [&](const StepRecord& r) { return r.values.count(field) > 0; });
}

RunData read_run(const std::string& dir) {
  RunData run;
  run.dir = dir;
  run.records = read_metrics(dir, run.notes);
  run.rank_reports = read_rank_reports(dir, run.notes);
  const fs::path job_path = fs::path(dir) / kJobFile;
  std::error_code ec;
  if (fs::exists(job_path, ec)) {
    config::LoadOptions options;
    options.file = job_path.string();
    options.check_paths = false;  // the run's data may be elsewhere now; the figures are what count
    run.job = config::load_job(options).job;  // ConfigError (exit 2) names the file and the key
  } else {
    run.notes.push_back(std::string(kJobFile) + " is missing (accel launch writes it): no memory estimate");
  }
  if (run.job && !run.job->program.empty()) {
    run.notes.push_back("the job runs a program of its own (program:), whose model accel estimate-memory does not "
                        "size: no memory estimate");
  } else if (run.job) {
    try {
      run.estimate = estimate::estimate_job(*run.job);
    } catch (const std::exception& e) {
      run.notes.push_back(std::string("no memory estimate: ") + e.what());
    }
  }
  if (run.estimate) run.strategy = run.estimate->configured_label;
  else if (!run.rank_reports.empty()) run.strategy = run.rank_reports[0].value("backend", "");
  else if (run.job) run.strategy = config::to_string(run.job->backend);
  return run;
}

void label_runs(std::vector<RunData>& runs) {
  for (int parts = 1; parts <= 8; ++parts) {
    std::set<std::string> seen;
    bool unique = true;
    for (auto& r : runs) {
      r.label = last_path_parts(fs::weakly_canonical(fs::absolute(r.dir)), parts);
      unique = seen.insert(r.label).second && unique;
    }
    if (unique) return;
  }
}

}  // namespace accel::report
