// The accel executable, the launcher: builds the command tree. It never loads libtorch: what needs
// torch (the workers, merge-weights, the torch facts of `accel env`) runs in accel-worker
// (cli/worker/), which it starts. Errors become exit codes in cli/exit_status.cpp.
#include "cli/commands.hpp"
#include "cli/exit_status.hpp"
#include "cli/launch_flags.hpp"
#include "runtime/diag/build_info.hpp"

int main(int argc, char** argv) {
  auto build = accel::diag::build_info();
  CLI::App app{"accel: sharded data-parallel training for libtorch (DeepSpeed- and FSDP-style backends)\n\n"
               "Examples:\n"
               "  accel config                                # answer a few questions, write a job file\n"
               "  accel launch config_templates/quickstart.yaml\n"
               "  accel launch job.yaml --set backend=fsdp    # the same job with FSDP semantics\n"
               "  accel estimate-memory job.yaml              # per-rank memory of every strategy\n"
               "  accel report runs/quickstart                # the run's curves as an HTML page and PNGs\n"
               "  accel env                                   # diagnostics for a bug report",
               "accel"};
  app.set_version_flag("--version", "accel " + build.accel_version + " (git " + build.git_revision + ")");
  app.require_subcommand(1);
  app.fallthrough(false);
  accel::cli::add_config_command(app);
  auto program_args = accel::cli::add_launch_command(app);
  accel::cli::add_env_command(app);
  accel::cli::add_test_command(app);
  accel::cli::add_bench_command(app);
  accel::cli::add_merge_weights_command(app);
  accel::cli::add_estimate_memory_command(app);
  accel::cli::add_report_command(app);

  // `accel launch ./program args...`: the program's arguments are its own, cut off before parsing.
  auto words = accel::cli::split_program_arguments(app, {argv, argv + argc}, *program_args);
  return accel::cli::run_and_map_errors(app, words);
}
