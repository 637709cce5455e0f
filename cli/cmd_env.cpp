// `accel env`: diagnostics a user pastes into a bug report (versions, machine, BLAS, GPUs, default job).
// The launcher never loads libtorch: it asks accel-worker for the torch facts (`accel-worker facts`),
// and a worker that cannot start is itself reported, with its reason, instead of failing the command.
#include <iostream>

#include "cli/commands.hpp"
#include "runtime/config/paths.hpp"
#include "runtime/diag/env_report.hpp"
#include "runtime/launch/captured_command.hpp"
#include "runtime/launch/worker_program.hpp"

namespace accel::cli {
namespace {

nlohmann::json torch_report_from_worker() {
  auto unavailable = [](const std::string& why) { return nlohmann::json{{"torch", {{"error", why}}}}; };
  try {
    const std::string program = launch::worker_program_path();
    // CUDA initialisation on a machine with GPUs takes seconds; a minute means something is stuck.
    auto r = launch::run_captured({program, "facts"}, std::chrono::seconds(60));
    if (r.timed_out) return unavailable(program + " facts did not finish within 60 s");
    auto report = nlohmann::json::parse(r.out, nullptr, /*allow_exceptions=*/false);
    if (r.exit_code != 0 || report.is_discarded() || !report.is_object())
      return unavailable(program + " facts failed (exit " + std::to_string(r.exit_code) + "): " +
                         (r.err.empty() ? r.out : r.err));
    return report;
  } catch (const std::exception& e) {
    return unavailable(e.what());
  }
}

}  // namespace

void add_env_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("env", "Print versions, machine facts, the BLAS in use and the default job file\n\n"
                                        "Examples:\n  accel env\n  accel env --json > env.json");
  auto json = std::make_shared<bool>(false);
  cmd->add_flag("--json", *json, "Print the report as JSON, for tools");
  cmd->callback([json] {
    auto report = diag::collect_env_report(config::default_job_path(), torch_report_from_worker());
    if (*json) std::cout << report.dump(2) << "\n";
    else std::cout << diag::render_env_report(report);
  });
}

}  // namespace accel::cli
