// One optimizer step's metrics (spec/training.md, Outputs), the metrics.jsonl file, and the
// per-step log line. Invariant: metrics.jsonl holds one record per completed step in step order;
// a resumed run first drops the records at or after its start step, so an interrupted and resumed
// run ends with the same file as an uninterrupted one (timing fields aside).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/metrics_log.hpp"

namespace accel::train {

struct StepMetrics {
  int64_t step = 0;            // 0-based optimizer step
  double loss = 0;             // mean token cross-entropy over the global batch
  double lr = 0;
  double grad_norm = 0;        // before clipping
  int64_t tokens = 0;          // tokens in the global batch
  double step_time_s = 0;
  double tokens_per_s = 0;
  int64_t peak_mem_bytes = 0;  // max over ranks of each rank's peak
  double comm_bytes = 0;       // this rank's bus bytes in the step, every communicator (comm_stats.hpp)
  std::optional<double> eval_loss;
  std::optional<double> loss_scale;  // fp16 only: the scale this step's loss was multiplied by
  bool skipped = false;              // fp16 only: the gradients overflowed, no optimizer step
};

nlohmann::json to_json(const StepMetrics& m);

// The record's scalars under the trackers' names (docs/design/0024): train/loss, train/lr,
// train/grad_norm, eval/loss, perf/tokens_per_s, ...; the optional ones only when present.
std::vector<std::pair<std::string, double>> tracker_scalars(const StepMetrics& m);

// The trainer's metrics.jsonl (api::MetricsLog with the trainer's conventions): records carry
// the step index, so a run resumed after N steps keeps step < N.
class MetricsFile {
 public:
  // Opens `path` for appending after keeping only the records with step < keep_before (0: start
  // empty). The kept prefix is rewritten atomically first. Throws RunError on I/O errors or when a
  // kept line is not a metrics record (a last line cut short by a crash is dropped).
  MetricsFile(std::string path, int64_t keep_before);

  // One JSON line, flushed, so a crash loses at most the step in progress.
  void append(const StepMetrics& m);

 private:
  api::MetricsLog log_;
};

// The step's progress line (api/progress_line.hpp), as acc.print_progress() prints it for a user's loop:
// "step   12/60 | loss 4.1234 | lr 1.00e-03 | grad_norm 0.532 | 12.3k tok/s | 85.1 ms | peak 312 MiB",
// with " | eval_loss 4.2" on evaluation steps and " | loss_scale 65536" (", skipped: overflow") under fp16. With progress_bar, a bar and a percentage first.
std::string format_step_line(const StepMetrics& m, int64_t total_steps, bool progress_bar);

}  // namespace accel::train
