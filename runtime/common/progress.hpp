// Progress of long work on one line (setup, checkpoint writing, weight export, evaluation), and how
// long it took in the log. Torch-free; the trainer, the Accelerator and accel-worker share it.
//
//   tty:   "checkpoint step_00000150: writing [########............]  40% 12.0/30.0 MiB, 1 file | 0.8 s"
//          redrawn in place (each draw ends "\x1b[K\r"; an empty one clears), at most every 0.1 s;
//   lines: one start line "checkpoint step_00000150 ..." and no other until the end;
//   both:  an end line "checkpoint step_00000150 took 0.83 s (2 files, 30.0 MiB, 36.1 MiB/s)".
// Under `accel launch` a worker's stdout is a pipe: the launcher says which display its terminal
// takes (ACCEL_PROGRESS) and draws a worker's "...\r" segments in place (runtime/launch/line_relay).
// Invariant: a Task prints nothing but its start line (lines) or redraws (tty), and its end line;
// never a line per unit of work. Only a visible task (rank 0) prints; every task keeps its time.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

namespace accel::progress {

enum class Display { tty, lines, off };

// ACCEL_PROGRESS=tty|lines|off; unset (a process started without the launcher): tty when stdout
// is a terminal, else lines. An unknown value is lines, with a warning. Read once per process.
Display display_from_env();

// "[#####...............]  25% ": the bar of the trainer's progress line (api/progress_line) too.
std::string bar(int64_t done, int64_t total);

// Where a task's output goes: `line` a log line (logging::info); `draw` the status to show in place
// ("" clears it): the standard one writes it to stdout, cut to the terminal's width when stdout is
// one, then "\x1b[K\r", flushed. Tests capture both.
struct Output {
  std::function<void(const std::string&)> line;
  std::function<void(const std::string&)> draw;
  static Output standard();
};

class Task {
 public:
  // Starts `what` ("evaluation at step 50"). `visible` false: prints nothing (ranks other than 0).
  Task(std::string what, bool visible, Display display = display_from_env(), Output output = Output::standard());
  Task(const Task&) = delete;
  Task& operator=(const Task&) = delete;
  // Unfinished: finish()es it, except while an exception unwinds (then it only clears a drawn line:
  // the error says what went wrong).
  ~Task();

  // Counted work: `total` items named `noun` ("batches"). Bytes are counted by the writer hooks.
  void set_total(int64_t total, std::string noun);
  void set_stage(std::string stage);  // "gathering the full weights"; redraws at once
  void advance(int64_t n = 1);
  // Logs "<what> took X s (details)" once; returns the seconds.
  double finish();
  double seconds() const;
  uint64_t bytes_written() const { return bytes_; }
  int64_t files_written() const { return files_; }

  // The writer hooks' side (below); the registry's lock is held.
  void add_bytes(uint64_t bytes);
  void add_file_written();
  void set_expected_bytes(uint64_t bytes) { bytes_total_ = bytes; }
  void set_stage_locked(std::string stage);

 private:
  std::string status() const;
  void draw(bool force);

  using Clock = std::chrono::steady_clock;
  std::string what_, stage_, noun_;
  bool visible_;
  Display display_;
  Output output_;
  Clock::time_point start_, last_draw_;
  int64_t done_ = 0, total_ = 0, files_ = 0;
  uint64_t bytes_ = 0, bytes_total_ = 0;
  bool drawn_ = false, finished_ = false;
  int uncaught_ = 0;
};

// Hooks into the innermost live Task of the process (no-ops without one; thread-safe), for code
// below the task's owner: the safetensors writer counts bytes and files, and whoever knows the
// size of what follows announces it (expect_bytes: the bar and "12 MiB of 30 MiB"), and a callee
// names the part it is in (stage).
void expect_bytes(uint64_t bytes);
void stage(const std::string& text);
void bytes_written(uint64_t bytes);
void file_written();

}  // namespace accel::progress
