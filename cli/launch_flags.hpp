// `accel launch` with Hugging Face Accelerate's habits: `accel launch [--config_file JOB] [flags]
// [JOB] [./program args...]`. Accelerate's common flags (--num_processes, --mixed_precision,
// --use_deepspeed, ...) map onto job keys on the command-line layer (where --set lives), and a
// program named after the options runs with every argument after it passed through untouched.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "runtime/config/assignment.hpp"

namespace accel::cli {

// The values of Accelerate-style flags as written, by flag name without dashes ("num_processes").
struct AccelerateFlags {
  std::vector<std::pair<std::string, std::string>> given;  // in the order of the flag table
  std::string config_file;                                  // --config_file
};

// Registers Accelerate's flags on `launch`; values land in `flags` when parsed.
void add_accelerate_flags(CLI::App* launch, const std::shared_ptr<AccelerateFlags>& flags);

// The job-key assignments the given flags stand for, each located at its flag ("--num_processes 2"),
// applied before --set so a flag and a --set of one key that disagree are reported as set twice.
std::vector<config::Assignment> flag_assignments(const AccelerateFlags& flags);

// "--num_processes 2 -> num_processes: 2", one line per given flag, for the launch banner.
std::vector<std::string> describe_flags(const AccelerateFlags& flags);

enum class LaunchTarget { JobFile, Program, PythonScript, NotFound };

// What a positional argument of `accel launch` names: a job file (.yaml/.yml/.json, or an existing
// file that is not executable), a program (an executable file, or a name found on PATH), a Python
// script (refused with what to run instead), or nothing that exists.
LaunchTarget classify_launch_target(const std::string& arg);

// The executable a program argument names: an absolute path (so workers find it wherever they run).
std::string resolve_program(const std::string& arg);

// Splits the command line at the program: every argument after a program named by `accel launch`
// belongs to the program, even one that looks like an accel option. Returns the arguments CLI11
// parses (the program's own arguments cut off) and moves the cut-off ones into `program_args`.
// Anything other than `accel launch ...` is returned unchanged.
std::vector<std::string> split_program_arguments(const CLI::App& app, const std::vector<std::string>& argv,
                                                 std::vector<std::string>& program_args);

}  // namespace accel::cli
