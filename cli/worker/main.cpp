// accel-worker: everything of accel that needs libtorch, started by the launcher (`accel`): each
// rank of a job (`run`), `merge-weights`, and the torch facts of `accel env` (`facts`). Exit codes
// as accel's (cli/exit_status.hpp), which the launcher passes on.
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "cli/exit_status.hpp"
#include "cli/worker/worker_commands.hpp"
#include "runtime/common/log.hpp"
#include "runtime/diag/build_info.hpp"

int main(int argc, char** argv) {
  // Before anything logs: every line in the trainer's plain format (spdlog's default pattern would
  // stamp the first lines, logged while the world is set up, with a date and level).
  accel::logging::configure_from_env();
  auto build = accel::diag::build_info();
  CLI::App app{"accel-worker: the part of accel that links libtorch; `accel` starts it (see accel --help)",
               "accel-worker"};
  app.set_version_flag("--version", "accel-worker " + build.accel_version + " (git " + build.git_revision + ")");
  app.require_subcommand(1);
  app.fallthrough(false);
  accel::cli::worker_program::add_run_command(app);
  accel::cli::worker_program::add_merge_weights_command(app);
  accel::cli::worker_program::add_facts_command(app);
  const int status = accel::cli::run_and_map_errors(app, argc, argv);
  // Everything the commands own is closed by now. What is left is libtorch's static teardown
  // (every registered operator deregistered again), about a fifth of a short worker's CPU time:
  // flush the streams and leave without it.
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  std::_Exit(status);
}
