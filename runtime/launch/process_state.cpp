// Process states from /proc; see process_state.hpp.
#include "runtime/launch/process_state.hpp"

#include <fstream>
#include <iterator>

namespace accel::launch {

char parse_stat_state(const std::string& stat_line) {
  const auto paren = stat_line.rfind(')');
  if (paren == std::string::npos || paren + 2 >= stat_line.size() || stat_line[paren + 1] != ' ') return 0;
  return stat_line[paren + 2];
}

char process_state(pid_t pid) {
  if (pid <= 0) return 0;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return 0;
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  return parse_stat_state(text);
}

std::string describe_hang_state(char state) {
  switch (state) {
    case 'T':
      return "stopped (process state T: SIGSTOP or SIGTSTP)";
    case 't':
      return "stopped by a debugger (process state t: tracing stop)";
    case 'D':
      return "blocked in the kernel (process state D: uninterruptible sleep, often a hung file system or device)";
    default:
      return "";
  }
}

}  // namespace accel::launch
