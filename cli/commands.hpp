// Registration of the accel subcommands. Each subcommand lives in its own cmd_*.cpp, binds its
// flags to a small options struct and runs from a CLI11 callback. Subcommands throw accel's typed
// errors; only main.cpp turns them into exit codes.
#pragma once

#include <CLI/CLI.hpp>

#include <memory>

#include "runtime/config/job_loader.hpp"

namespace accel::cli {

void add_config_command(CLI::App& app);
// Returns where the launch command finds its program's own arguments: main fills it from the
// command line before parsing (launch_flags.hpp, split_program_arguments).
std::shared_ptr<std::vector<std::string>> add_launch_command(CLI::App& app);
void add_env_command(CLI::App& app);
void add_test_command(CLI::App& app);
void add_bench_command(CLI::App& app);
void add_worker_command(CLI::App& app);
void add_estimate_memory_command(CLI::App& app);
void add_merge_weights_command(CLI::App& app);
void add_report_command(CLI::App& app);

// Loads and validates a job (native, Accelerate or DeepSpeed file) with the process's ACCEL_*
// environment and the given --set overrides, printing warnings to stderr. An empty `file` means
// the user's default job file (`accel config` writes it), or only defaults when `allow_none`.
// `check_paths` false skips the checks of files and directories (data, output), for commands that
// only read the job's figures (a job may be meant for another machine).
// --set key.path=value, repeatable; each occurrence takes exactly one value so that a job path
// after it stays positional (`accel launch --set a=1 job.yaml`).
CLI::Option* add_set_option(CLI::App* command, std::vector<std::string>& overrides);

// `gpus_here` (accel launch): resolve the job's placement on this machine (runtime/config/placement.hpp).
config::LoadedJob load_job_for_cli(const std::string& file, const std::vector<std::string>& overrides,
                                   bool allow_none = false, bool check_paths = true,
                                   std::optional<config::GpuCount> gpus_here = std::nullopt,
                                   std::vector<config::Assignment> flag_assignments = {});

}  // namespace accel::cli
