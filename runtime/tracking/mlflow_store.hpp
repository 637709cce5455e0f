// One run in an MLflow file store (docs/design/0024), written as MLflow's FileStore lays it out:
//   <root>/0/meta.yaml                     experiment 0, "Default" (MLflow makes it on first use)
//   <root>/1/meta.yaml                     experiment 1, named by the caller (tracking.project_name)
//   <root>/1/<run_id>/meta.yaml            the run: name, status, start and end times
//   <root>/1/<run_id>/metrics/<key>        a line "<unix ms> <value> <step>" per logged value
//   <root>/1/<run_id>/params/<key>         the value, as text
//   <root>/1/<run_id>/tags/<key>           mlflow.runName, mlflow.source.name (accel), mlflow.user
//   <root>/1/<run_id>/artifacts/           empty (FileStore only takes a run directory that has one)
// Invariant: the store holds one run of accel's, found again on every start by its
// mlflow.source.name tag; opening keeps exactly the metric lines of the steps the caller keeps
// (each file rewritten atomically) and replaces the params.
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace accel::tracking {

class MlflowRun {
 public:
  // Opens (creating what is missing) the store at `root` and accel's run in it, RUNNING, after
  // dropping the metric lines with step >= keep_below (0: every line). Throws RunError on I/O
  // errors and on a metric line before a file's last that is not "<ms> <value> <step>".
  MlflowRun(const std::string& root, const std::string& experiment_name, const std::string& run_name,
            int64_t keep_below);
  // Closes the run: FINISHED, or FAILED while an exception unwinds (a killed process leaves RUNNING).
  ~MlflowRun();
  MlflowRun(const MlflowRun&) = delete;
  MlflowRun& operator=(const MlflowRun&) = delete;

  // Replaces the run's params with these (key -> value text).
  void set_params(const std::vector<std::pair<std::string, std::string>>& params);
  // Appends one line per value to metrics/<key>, each file flushed.
  void log_metrics(int64_t step, const std::vector<std::pair<std::string, double>>& values);

  const std::string& run_dir() const { return run_dir_; }
  const std::string& run_id() const { return run_id_; }

  // Why MLflow would refuse `name` as a metric or param key (its allowed characters: letters,
  // digits, _ - . space : /; no path that normalizes to another name), or "" when it takes it.
  static std::string refusal_of_name(const std::string& name);

 private:
  void write_run_meta(int status, int64_t end_time_ms);
  std::string experiment_dir_, run_dir_, run_id_, run_name_, user_;
  int64_t start_time_ms_ = 0;
  std::map<std::string, std::FILE*> metric_files_;
};

}  // namespace accel::tracking
