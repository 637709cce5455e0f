// The one place where errors become exit codes, shared by the launcher (`accel`) and the worker
// program (`accel-worker`): 0 success, 1 the run failed, 2 bad usage or bad configuration.
#pragma once

#include <CLI/CLI.hpp>

namespace accel::cli {

// Parses argv into `app` (its callbacks run the command) and maps what escapes to an exit code,
// printing the error on stderr.
int run_and_map_errors(CLI::App& app, int argc, char** argv);
// The same for a command line already split into words (argv[0] first).
int run_and_map_errors(CLI::App& app, const std::vector<std::string>& argv);

}  // namespace accel::cli
