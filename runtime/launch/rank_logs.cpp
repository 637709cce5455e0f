// Per-rank log files; see rank_logs.hpp.
#include "runtime/launch/rank_logs.hpp"

#include <unistd.h>

#include <filesystem>
#include <stdexcept>

#include "runtime/common/safe_file.hpp"
#include "runtime/launch/line_relay.hpp"

namespace accel::launch {

std::string RankLogs::path(const std::string& log_dir, int rank) {
  if (log_dir.empty()) return {};
  return (std::filesystem::path(log_dir) / ("rank_" + std::to_string(rank) + ".log")).string();
}

RankLogs::RankLogs(const std::string& log_dir, const std::vector<int>& ranks, int restart_count) {
  if (log_dir.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(log_dir, ec);
  if (ec) throw std::runtime_error("cannot create the log directory " + log_dir + ": " + ec.message());
  // Never through a link planted at a log's name (files::open_for_write: UsageError naming it).
  const auto how = restart_count == 0 ? files::WriteMode::truncate : files::WriteMode::append;
  for (int rank : ranks) {
    std::string file = path(log_dir, rank);
    int fd = -1;
    try {
      fd = files::open_for_write(file, how);
    } catch (...) {
      for (int open_fd : fds_) close(open_fd);
      fds_.clear();
      throw;
    }
    fds_.push_back(fd);
    if (restart_count > 0) write_all(fd, "--- restart " + std::to_string(restart_count) + " ---\n");
  }
}

RankLogs::~RankLogs() {
  for (int fd : fds_) close(fd);
}

}  // namespace accel::launch
