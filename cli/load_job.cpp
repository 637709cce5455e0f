// Shared by every subcommand that reads a job: resolve the file, load with the environment and
// --set overrides, print warnings once.
#include <filesystem>
#include <iostream>

#include "cli/commands.hpp"
#include "runtime/config/paths.hpp"

namespace accel::cli {

CLI::Option* add_set_option(CLI::App* command, std::vector<std::string>& overrides) {
  return command->add_option("--set", overrides, "Override a key: --set section.key=value (repeatable)")
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
}

config::LoadedJob load_job_for_cli(const std::string& file, const std::vector<std::string>& overrides, bool allow_none,
                                   bool check_paths, std::optional<config::GpuCount> gpus_here,
                                   std::vector<config::Assignment> flag_assignments) {
  config::LoadOptions options;
  options.file = file;
  if (options.file.empty()) {
    std::string fallback = config::default_job_path();
    if (std::filesystem::exists(fallback)) options.file = fallback;
    else if (!allow_none)
      throw UsageError("no job file given and no default job at " + fallback +
                       "; pass a job file, or run `accel config` to write one");
  }
  options.set_overrides = overrides;
  options.flag_assignments = std::move(flag_assignments);
  options.environment = config::accel_environment();
  options.check_paths = check_paths;
  options.gpus_here = std::move(gpus_here);
  auto loaded = config::load_job(options);
  for (const auto& w : loaded.warnings) std::cerr << w.render("warning") << "\n";
  return loaded;
}

}  // namespace accel::cli
