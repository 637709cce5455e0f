// One run directory as `accel report` reads it: metrics.jsonl (one record per step), the run
// reports report/rank_<r>.json, and job.resolved.yaml, with the memory estimate of that job
// (the code of `accel estimate-memory`). Torch-free.
// Invariant: metrics.jsonl is required and every line of it parses, except a last line cut short
// (a run still writing, or stopped mid-line), which is left out with a note; the run reports and
// the job are optional (a run that did not finish has no report), but one that exists and does not
// parse is an error. Every error is a UsageError (exit 2) naming the file, what is wrong and a fix.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/estimate/job_estimate.hpp"

namespace accel::report {

// One metrics.jsonl record: the step and its numeric fields ("loss", "eval_loss", ...).
struct StepRecord {
  int64_t step = 0;
  std::map<std::string, double> values;
};

struct RunData {
  std::string dir;    // as given
  std::string label;  // the directory's name, made unique among the runs compared
  std::vector<StepRecord> records;  // in file order (a resumed run rewrote its file in step order)
  std::vector<nlohmann::json> rank_reports;  // report/rank_<r>.json by rank; empty: none written
  std::optional<config::JobConfig> job;      // job.resolved.yaml, when present
  std::optional<estimate::JobEstimate> estimate;  // of the job's own model and strategy
  std::string strategy;  // "deepspeed zero_stage 3", "fsdp FULL_SHARD", "ddp"; the report's backend else
  std::vector<std::string> notes;  // what is missing and why, one sentence each

  // The records' values of `field`, as (step, value) pairs, in order.
  std::vector<std::pair<double, double>> series(const std::string& field) const;
  bool has(const std::string& field) const;
};

// Reads `dir`; throws UsageError (see the invariant above).
RunData read_run(const std::string& dir);

// Labels: each directory's name, or more of its path where two runs share a name.
void label_runs(std::vector<RunData>& runs);

}  // namespace accel::report
