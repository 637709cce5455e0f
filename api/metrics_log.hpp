// metrics.jsonl: one JSON record per line, appended as a run goes, written by the trainer and by
// the public API's acc.log(). This class owns the file: opening, truncation on resume, appending
// and flushing. What a line holds, and what an unreadable line means, stay with each writer.
// Invariant: a resumed run first keeps only the records of the steps its checkpoint holds, and
// the kept prefix replaces the file atomically (written beside it, fsynced, then renamed over
// it): a crash while opening leaves either the old file or the new one, never a mix.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <optional>
#include <string>

namespace accel::api {

// Which records a run resumed after N steps keeps. The two writers number their records
// differently: the trainer writes the step index (0-based), so it keeps step < N; acc.log writes
// what its caller passes (the examples pass the step count, 1-based), so it keeps step <= N.
enum class ResumeKeeps { steps_before, steps_through };

// A writer's reading of one line of an existing file: its step, or nullopt to drop the line.
// It may throw to refuse the file. `lineno` is 1-based; `last` says no line follows (a crash can
// cut the last line short).
using StepOfLine = std::function<std::optional<int64_t>(const std::string& line, int lineno, bool last)>;

class MetricsLog {
 public:
  // Opens `path` for appending. `resumed_steps` 0 starts an empty file; otherwise the records that
  // `keeps` keeps stay, in file order, and every other line goes (stage_kept_records, then the
  // rename). Throws RunError (CheckpointError when the kept lines cannot be written) on I/O errors,
  // UsageError for a symbolic link at `path` or at the staged file's name (never followed).
  MetricsLog(std::string path, int64_t resumed_steps, ResumeKeeps keeps, const StepOfLine& step_of);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;

  // Writes `line` and a '\n', then flushes, so a crash loses at most the record being written.
  void append(const std::string& line);

  // The first half of opening: writes the lines to keep to staging_path(path) and fsyncs them.
  // `path` itself is untouched until the constructor renames the staged file over it.
  static void stage_kept_records(const std::string& path, int64_t resumed_steps, ResumeKeeps keeps,
                                 const StepOfLine& step_of);
  static std::string staging_path(const std::string& path) { return path + ".tmp"; }

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
};

}  // namespace accel::api
