#include "runtime/tracking/trackers.hpp"

#include <algorithm>
#include <filesystem>

#include "runtime/common/errors.hpp"
#include "runtime/config/dump.hpp"
#include "runtime/config/schema.hpp"
#include "runtime/tracking/event_file.hpp"
#include "runtime/tracking/mlflow_store.hpp"

namespace accel::tracking {
namespace {

// The run's name in MLflow: the output directory's last part.
std::string run_name_of(const std::string& output_dir) {
  std::filesystem::path p = std::filesystem::absolute(output_dir).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  return p.filename().string();
}

// TensorBoard's text plugin renders Markdown: indented four spaces, the YAML shows verbatim.
std::string as_markdown_code(const std::string& text) {
  std::string out;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    out += "    " + text.substr(start, end - start) + "\n";
    start = end + 1;
  }
  return out;
}

}  // namespace

std::vector<std::string> trackers_of(const config::TrackingSection& tracking) {
  const auto& names = tracking.log_with;
  const bool all = std::find(names.begin(), names.end(), "all") != names.end();
  std::vector<std::string> out;
  for (const char* name : {"tensorboard", "mlflow"})
    if (all || std::find(names.begin(), names.end(), name) != names.end()) out.push_back(name);
  return out;
}

Trackers::Trackers(const config::JobConfig& job, int64_t keep_below) {
  const std::string& out = job.training.output_dir;
  const std::vector<std::string> names = trackers_of(job.tracking);
  const bool tensorboard = std::find(names.begin(), names.end(), "tensorboard") != names.end();
  const bool mlflow = std::find(names.begin(), names.end(), "mlflow") != names.end();
  if (tensorboard) {
    events_ = std::make_unique<EventFile>(tensorboard_dir(out), keep_below);
    events_->text(0, "job", as_markdown_code(config::dump_job(job, {}, config::DumpStyle::Full)));
  }
  if (mlflow) {
    mlflow_ = std::make_unique<MlflowRun>(mlflow_root(out), job.tracking.project_name, run_name_of(out), keep_below);
    std::vector<std::pair<std::string, std::string>> params;
    for (const auto& f : config::schema())
      if (f.alias_of.empty()) params.emplace_back(f.path, config::value_to_yaml(f.get(job)));
    mlflow_->set_params(params);
  }
}

Trackers::~Trackers() = default;

void Trackers::log(int64_t step, const std::vector<std::pair<std::string, double>>& values) {
  if (mlflow_)  // every name first, so a refused one leaves no tracker with part of the record
    for (const auto& [name, value] : values)
      if (const std::string why = MlflowRun::refusal_of_name(name); !why.empty())
        throw RunError("tracking: the name '" + name + "' cannot be an MLflow metric: " + why);
  if (events_) events_->scalars(step, values);
  if (mlflow_) mlflow_->log_metrics(step, values);
}

}  // namespace accel::tracking
