// A shell command running in the background with its output in a file, for tests that signal a
// running launcher or run two launchers at once (on a reserve_port()). The destructor kills what
// is left.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <optional>
#include <string>
#include <thread>

#include "support/reserved_port.hpp"
#include "support/temp_dir.hpp"

namespace accel::test {

class Background {
 public:
  Background(const std::string& command, const std::string& log_path) : log_(log_path) {
    pid_ = fork();
    if (pid_ == 0) {
      setpgid(0, 0);
      execl("/bin/bash", "bash", "-c", ("exec " + command + " > " + log_path + " 2>&1").c_str(), nullptr);
      _exit(127);
    }
  }
  ~Background() {
    if (!exit_code_) {
      kill(-pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  pid_t pid() const { return pid_; }
  // The exit code (128 + signal when killed), or nullopt if still running after `timeout`.
  std::optional<int> wait_for(std::chrono::milliseconds timeout) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!exit_code_) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        break;
      }
      if (std::chrono::steady_clock::now() > deadline) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return exit_code_;
  }
  std::string output() const { return read_file(log_); }

 private:
  pid_t pid_ = -1;
  std::string log_;
  std::optional<int> exit_code_;
};

inline bool process_alive(pid_t pid) { return kill(pid, 0) == 0; }

}  // namespace accel::test
