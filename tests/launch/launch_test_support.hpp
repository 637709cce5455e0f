// Helpers for launcher tests: bash-script worker plans, waiting for files the workers write,
// process liveness checks, and running the launcher in a forked child (for signal tests and to
// capture its stdout/stderr).
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "runtime/launch/launch_plan.hpp"
#include "support/temp_dir.hpp"

namespace accel::test::launch {

using accel::launch::LaunchPlan;
using accel::launch::LaunchResult;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

// A single-machine plan running `bash <dir>/worker.sh` (body given) in n workers, with OUT_DIR=<dir>
// in their environment and logs in <dir>/logs.
inline LaunchPlan script_plan(const TempDir& dir, const std::string& body, int workers) {
  LaunchPlan plan;
  plan.worker_argv = {"bash", dir.write("worker.sh", "set -u\n" + body)};
  plan.world_size = workers;
  plan.local_world_size = workers;
  plan.master_port = 0;  // the launcher binds it: a fixed port would collide between parallel tests
  plan.log_dir = (dir.path() / "logs").string();
  plan.shutdown_grace = 2000ms;
  plan.extra_env["OUT_DIR"] = dir.path().string();
  return plan;
}

// Shell lines that publish the worker's pid atomically as $OUT_DIR/pid_$RANK.
inline std::string publish_pid() {
  return "echo $$ > \"$OUT_DIR/pid_$RANK.tmp\" && mv \"$OUT_DIR/pid_$RANK.tmp\" \"$OUT_DIR/pid_$RANK\"\n";
}

inline bool wait_for_files(const std::vector<std::string>& paths, std::chrono::milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  for (;;) {
    bool all = true;
    for (const auto& p : paths) all = all && std::filesystem::exists(p);
    if (all) return true;
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(20ms);
  }
}

inline std::vector<std::string> pid_files(const TempDir& dir, int workers, const std::string& stem = "pid_") {
  std::vector<std::string> paths;
  for (int r = 0; r < workers; ++r) paths.push_back((dir.path() / (stem + std::to_string(r))).string());
  return paths;
}

inline std::vector<pid_t> read_pids(const std::vector<std::string>& paths) {
  std::vector<pid_t> pids;
  for (const auto& p : paths) {
    pid_t pid = 0;
    std::ifstream(p) >> pid;
    pids.push_back(pid);
  }
  return pids;
}

// True when no process `pid` exists (it was reaped).
inline bool reaped(pid_t pid) { return kill(pid, 0) != 0 && errno == ESRCH; }

// True when `pid` is gone or a zombie: orphans are reparented to PID 1, which may reap them late.
inline bool dead(pid_t pid) {
  if (reaped(pid)) return true;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  auto paren = text.rfind(')');
  return paren != std::string::npos && paren + 2 < text.size() && text[paren + 2] == 'Z';
}

inline bool wait_dead(pid_t pid, std::chrono::milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  while (!dead(pid)) {
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(20ms);
  }
  return true;
}

// The launcher running in a forked child: its stdout/stderr go to files, its summary to a file.
struct ForkedLauncher {
  pid_t pid = -1;
  std::string stdout_path, stderr_path, summary_path;
};

inline ForkedLauncher fork_launcher(const TempDir& dir, const LaunchPlan& plan) {
  ForkedLauncher launcher;
  launcher.stdout_path = (dir.path() / "launcher.out").string();
  launcher.stderr_path = (dir.path() / "launcher.err").string();
  launcher.summary_path = (dir.path() / "launcher.summary").string();
  std::fflush(nullptr);
  launcher.pid = fork();
  if (launcher.pid == 0) {
    int out = open(launcher.stdout_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int err = open(launcher.stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(out, 1);
    dup2(err, 2);
    int code = 99;
    try {
      LaunchResult result = accel::launch::run_launch(plan);
      std::ofstream(launcher.summary_path) << result.summary;
      code = result.exit_code;
    } catch (...) {
    }
    _exit(code);
  }
  return launcher;
}

// Waits for the forked launcher; returns its wait status, or -1 (after SIGKILL) past the timeout.
inline int wait_launcher(const ForkedLauncher& launcher, std::chrono::milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  int status = 0;
  while (waitpid(launcher.pid, &status, WNOHANG) == 0) {
    if (Clock::now() >= deadline) {
      kill(launcher.pid, SIGKILL);
      waitpid(launcher.pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(10ms);
  }
  return status;
}

}  // namespace accel::test::launch
