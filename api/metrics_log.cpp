#include "api/metrics_log.hpp"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <system_error>
#include <utility>
#include <vector>

#include "runtime/checkpoint/checkpoint_store.hpp"
#include "runtime/common/errors.hpp"
#include "runtime/common/safe_file.hpp"

namespace accel::api {

void MetricsLog::stage_kept_records(const std::string& path, int64_t resumed_steps, ResumeKeeps keeps,
                                    const StepOfLine& step_of) {
  std::string kept;
  if (resumed_steps > 0) {
    std::vector<std::string> lines;
    std::ifstream in(path);  // no file: nothing to keep
    for (std::string line; std::getline(in, line);) lines.push_back(std::move(line));
    for (size_t i = 0; i < lines.size(); ++i) {
      const std::optional<int64_t> step = step_of(lines[i], int(i + 1), i + 1 == lines.size());
      if (!step) continue;
      if (keeps == ResumeKeeps::steps_before ? *step < resumed_steps : *step <= resumed_steps) kept += lines[i] + "\n";
    }
  }
  checkpoint::write_file_synced(staging_path(path), kept);
}

MetricsLog::MetricsLog(std::string path, int64_t resumed_steps, ResumeKeeps keeps, const StepOfLine& step_of)
    : path_(std::move(path)) {
  // A link planted at the file's name is refused, not read through nor silently replaced; the
  // staged file and the reopened one are never opened through a link either (safe_file.hpp).
  files::refuse_link(path_);
  stage_kept_records(path_, resumed_steps, keeps, step_of);
  std::error_code ec;
  std::filesystem::rename(staging_path(path_), path_, ec);
  if (ec) throw RunError("cannot replace " + path_ + ": " + ec.message());
  file_ = files::fopen_for_write(path_, files::WriteMode::append);
}

MetricsLog::~MetricsLog() {
  if (file_) std::fclose(file_);
}

void MetricsLog::append(const std::string& line) {
  const std::string text = line + "\n";
  if (std::fwrite(text.data(), 1, text.size(), file_) != text.size() || std::fflush(file_) != 0)
    throw RunError("cannot write " + path_ + ": " + std::strerror(errno));
}

}  // namespace accel::api
