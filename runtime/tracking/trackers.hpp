// The trackers a job names in tracking.log_with (docs/design/0024), for rank 0 of a run: a
// TensorBoard event file under <output_dir>/tensorboard and an MLflow file store under
// <output_dir>/mlruns, both given the resolved job as hyper-parameters when opened and every
// log(step, values) after. Torch-free: the trainer and the public API's acc.log() each own one.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/config/job.hpp"

namespace accel::tracking {

class EventFile;
class MlflowRun;

// The tracker names that tracking.log_with holds, `all` expanded, without repeats, in
// Accelerate's order (tensorboard, mlflow).
std::vector<std::string> trackers_of(const config::TrackingSection& tracking);

class Trackers {
 public:
  // Opens the job's trackers (none for an empty log_with), keeping of an earlier run in the same
  // output_dir only the records with step < keep_below, as metrics.jsonl keeps them (0: none).
  // Throws RunError on I/O errors and on damaged earlier records.
  Trackers(const config::JobConfig& job, int64_t keep_below);
  ~Trackers();
  Trackers(const Trackers&) = delete;
  Trackers& operator=(const Trackers&) = delete;

  bool empty() const { return !events_ && !mlflow_; }
  // One record: each value under its name at `step`, in every tracker. Throws RunError, having
  // written nothing, for a name MLflow would refuse (MlflowRun::refusal_of_name) when mlflow is on.
  void log(int64_t step, const std::vector<std::pair<std::string, double>>& values);

  static std::string tensorboard_dir(const std::string& output_dir) { return output_dir + "/tensorboard"; }
  static std::string mlflow_root(const std::string& output_dir) { return output_dir + "/mlruns"; }

 private:
  std::unique_ptr<EventFile> events_;
  std::unique_ptr<MlflowRun> mlflow_;
};

}  // namespace accel::tracking
