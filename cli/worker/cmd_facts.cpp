// `accel-worker facts`: libtorch's, the GPUs' and the BLAS's facts as JSON, for `accel env`.
#include <iostream>

#include "cli/worker/worker_commands.hpp"
#include "runtime/diag/torch_report.hpp"

namespace accel::cli::worker_program {

void add_facts_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("facts", "Print libtorch, GPU and BLAS facts as JSON (what `accel env` shows)");
  cmd->callback([] { std::cout << diag::collect_torch_report().dump() << "\n"; });
}

}  // namespace accel::cli::worker_program
