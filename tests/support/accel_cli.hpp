// The accel executable as the CLI tests run it (ACCEL_BINARY, which tests/CMakeLists.txt defines
// for each CLI test target): without the caller's ACCEL_JOB, job secret or opt-out, and with a
// private, empty config home, so a developer's environment cannot change what a test sees.
#pragma once

#include <filesystem>
#include <string>

#include "support/run_command.hpp"

namespace accel::test {

// The shell command: `env` holds VAR=value assignments for accel ("" for none), `args` its words
// (shell-quoted by the caller where needed, redirections allowed).
inline std::string accel_command(const std::string& args, const std::string& env = "") {
  return "env -u ACCEL_JOB -u ACCEL_SECRET_FILE -u ACCEL_ALLOW_UNAUTHENTICATED XDG_CONFIG_HOME=/nonexistent/accel-test " +
         (env.empty() ? std::string() : env + " ") + shell_quote(ACCEL_BINARY) + " " + args;
}

// Runs accel_command, capturing its combined output and exit code.
inline CommandResult run_accel(const std::string& args, const std::string& env = "") {
  return run_command(accel_command(args, env));
}

// The same, run in `dir` (relative paths in `args` resolve there).
inline CommandResult run_accel_in(const std::filesystem::path& dir, const std::string& args, const std::string& env = "") {
  return run_command("cd " + shell_quote(dir.string()) + " && " + accel_command(args, env));
}

}  // namespace accel::test
