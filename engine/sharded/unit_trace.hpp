// The per-unit schedule of a sharding engine, recorded for `accel launch --trace FILE`: when each
// unit's gather was issued and completed, when it was resharded (storage freed), when its gradient
// reduction was issued and completed, and its forward/backward compute. Written in Chrome's trace
// event format (chrome://tracing, Perfetto): instant events carry the exact order ("args.seq"),
// complete ("X") events show gathers and reductions as spans.
// Invariant: events are recorded from the training thread only, in the order the engine acts, so
// "seq" order is the schedule (comm completions are observed when the engine waits on them).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace accel::engine {

enum class TraceEvent {
  gather_issued,
  gather_done,
  reshard,
  reduce_issued,
  reduce_done,
  forward_begin,
  forward_end,
  backward_begin,
  backward_end,
  optimizer_step,
};
const char* to_string(TraceEvent event);

class UnitTrace {
 public:
  explicit UnitTrace(int rank);

  void record(TraceEvent event, const std::string& unit);
  void next_step() { ++step_; }

  // Writes {"traceEvents": [...], "displayTimeUnit": "ms"} to `path` (throws RunError on I/O failure).
  void write_chrome_trace(const std::string& path) const;

 private:
  struct Entry {
    TraceEvent event;
    std::string unit;
    int64_t ts_us;
    int64_t step;
  };
  int rank_;
  int64_t step_ = 0;
  std::chrono::steady_clock::time_point origin_;
  std::vector<Entry> events_;
};

}  // namespace accel::engine
