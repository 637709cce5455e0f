// The accel executable: builds the command tree and is the only place where errors become exit
// codes: 0 success, 1 the run failed, 2 bad usage or bad configuration.
#include <yaml-cpp/exceptions.h>

#include <iostream>

#include "cli/commands.hpp"
#include "runtime/common/errors.hpp"
#include "runtime/diag/build_info.hpp"

int main(int argc, char** argv) {
  auto build = accel::diag::build_info();
  CLI::App app{"accel: sharded data-parallel training for libtorch (DeepSpeed- and FSDP-style backends)\n\n"
               "Examples:\n"
               "  accel config                                # answer a few questions, write a job file\n"
               "  accel launch config_templates/quickstart.yaml\n"
               "  accel launch job.yaml --set backend=fsdp    # the same job with FSDP semantics\n"
               "  accel estimate-memory job.yaml              # per-rank memory of every strategy\n"
               "  accel env                                   # diagnostics for a bug report",
               "accel"};
  app.set_version_flag("--version", "accel " + build.accel_version + " (git " + build.git_revision + ")");
  app.require_subcommand(1);
  app.fallthrough(false);
  accel::cli::add_config_command(app);
  accel::cli::add_launch_command(app);
  accel::cli::add_env_command(app);
  accel::cli::add_test_command(app);
  accel::cli::add_bench_command(app);
  accel::cli::add_merge_weights_command(app);
  accel::cli::add_worker_command(app);
  accel::cli::add_estimate_memory_command(app);

  try {
    app.parse(argc, argv);
    return 0;
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);  // prints help, version or the usage error
    return code == 0 ? 0 : 2;
  } catch (const accel::ConfigError& e) {
    std::cerr << e.what() << "\n";
    std::cerr << e.diagnostics().size() << (e.diagnostics().size() == 1 ? " error" : " errors")
              << " in the configuration; nothing was run.\n";
    return 2;
  } catch (const YAML::Exception& e) {
    // Only configuration code reads YAML; a node access the readers did not guard is still bad input.
    std::cerr << "error: in the configuration: " << e.what() << "\n";
    return 2;
  } catch (const accel::UsageError& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
