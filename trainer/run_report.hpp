// The per-rank run report, <output_dir>/report/rank_<r>.json: what this rank's backend holds
// (Backend::memory_report), what it sent per training step (communicator counters, evaluation and
// checkpoints excluded), its peak resident size, and where the wall time went (time_s).
// `scripts/bench_zero.py` reads these to set measured memory and traffic beside
// `accel estimate-memory` and the ZeRO paper's theory.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/comm/comm_stats.hpp"

namespace accel::train {

// Sums the collectives issued between snapshots of each communicator's counters: the world's and
// those of the backend's groups, each kept with its own size (the bus-byte factor depends on it).
class StepCommCounter {
 public:
  struct Group {
    std::string name;
    int size = 1;
    comm::CommStats total;
  };
  // Adds what communicator `name` (of `size` ranks) issued between `before` and `after`; returns
  // its bus bytes (comm_stats.hpp).
  double add(const std::string& name, int size, const comm::CommStats& before, const comm::CommStats& after);
  const std::vector<Group>& groups() const { return groups_; }

 private:
  std::vector<Group> groups_;
};

// Where a run's wall time went (seconds): setup (model, engine, data, resume), the training steps,
// evaluation, checkpoint saves, the weights export, and the rest (logging, metrics, the report).
struct RunTimes {
  double setup_s = 0, training_s = 0, evaluation_s = 0, checkpoint_s = 0, export_s = 0, total_s = 0;
  double other_s() const;
  nlohmann::json to_json() const;
  // "time: setup 1.2 s, training 10.3 s, evaluation 0.5 s, checkpoints 2.1 s, export 0.3 s, other 0.1 s (of 14.5 s)"
  std::string describe() const;
};

// comm_per_step sums every group: bus_bytes and by_kind (calls, payload and bus bytes, each group
// at its own size), and by_group gives each communicator's share.
nlohmann::json make_run_report(int rank, int world, const std::string& backend, const nlohmann::json& memory,
                               const StepCommCounter& comm, int64_t steps, int64_t peak_rss_bytes);

// The resident size now, after returning freed heap to the system (malloc_trim): what the process
// holds at rest, unlike the peak, which includes building the model before it was sharded.
int64_t resident_bytes_now();

// Writes the report of `rank` under `output_dir`/report/ (creating it), replacing the file whole;
// throws RunError on failure, UsageError for a symbolic link at its name (never followed).
void write_run_report(const std::string& output_dir, int rank, const nlohmann::json& report);

}  // namespace accel::train
