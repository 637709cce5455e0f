// The per-rank log files log_dir/rank_<r>.log that tee every worker line (unprefixed).
// Invariant: a launch starts each log empty; a restarted group appends to it behind one
// "--- restart N ---" marker line, so one file holds every attempt of a rank in order.
// Without a log_dir nothing is written and fd() is -1.
#pragma once

#include <string>
#include <vector>

namespace accel::launch {

class RankLogs {
 public:
  // Creates log_dir if needed and opens one log per rank in `ranks`; attempt 0 truncates, later
  // attempts append the marker. Throws std::runtime_error naming the directory or file, and
  // UsageError (a std::runtime_error too) for a symbolic link at a log's name, never followed.
  RankLogs(const std::string& log_dir, const std::vector<int>& ranks, int restart_count);
  ~RankLogs();
  RankLogs(const RankLogs&) = delete;
  RankLogs& operator=(const RankLogs&) = delete;

  int fd(size_t index) const { return index < fds_.size() ? fds_[index] : -1; }

  // "<log_dir>/rank_<rank>.log", or "" without a log_dir.
  static std::string path(const std::string& log_dir, int rank);

 private:
  std::vector<int> fds_;
};

}  // namespace accel::launch
