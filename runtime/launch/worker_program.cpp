#include "runtime/launch/worker_program.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "runtime/common/errors.hpp"

namespace accel::launch {

namespace fs = std::filesystem;

std::string worker_program_path() { return companion_program_path(kWorkerProgramName, kWorkerProgramEnv); }

std::string companion_program_path(const std::string& name, const std::string& env_var) {
  if (const char* set = std::getenv(env_var.c_str()); set && *set) {
    if (::access(set, X_OK) == 0) return set;
    throw RunError(env_var + "=" + set + " is not an executable file");
  }
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  const fs::path dir = ec ? fs::path(".") : self.parent_path();
  const fs::path candidates[] = {dir / name, dir / ".." / "libexec" / "accel" / name};
  for (const fs::path& p : candidates) {
    if (::access(p.c_str(), X_OK) != 0) continue;
    const fs::path tidy = fs::weakly_canonical(p, ec);  // ".../bin/../libexec/..." -> ".../libexec/..."
    return ec ? p.string() : tidy.string();
  }
  throw RunError("the program " + name + " was not found (looked for " + candidates[0].string() + " and " +
                 candidates[1].string() + "); build it (cmake --build build --target " + name +
                 "; scripts/build.sh builds every program), or point " + env_var + " at it");
}

void exec_worker_program(const std::vector<std::string>& args) { exec_program(worker_program_path(), args); }

void exec_program(const std::string& program, const std::vector<std::string>& args) {
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(program.c_str()));
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  ::execv(program.c_str(), argv.data());
  throw RunError("cannot start " + program + ": " + std::strerror(errno));
}

}  // namespace accel::launch
