// The one entry point that turns a job file plus overrides into a validated JobConfig.
// Precedence: defaults < file (and the DeepSpeed JSON it names) < ACCEL_* environment < --set.
// A job whose backend is deepspeed or fsdp but whose settings are in the other backend's block is
// translated (backend_translation.hpp) before validation, so every caller sees what will run.
// Accepts native job files, Accelerate config files and DeepSpeed JSON; every check runs here,
// before anything is spawned, and all problems of a pass are reported together.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "runtime/config/backend_translation.hpp"
#include "runtime/config/job.hpp"
#include "runtime/config/overrides.hpp"
#include "runtime/config/placement.hpp"

namespace accel::config {

enum class FileFormat { None, Native, Accelerate, DeepSpeed };
std::string to_string(FileFormat format);

struct LoadOptions {
  std::string file;                       // empty: defaults and overrides only
  std::vector<std::string> set_overrides; // "key.path=value"
  // accel launch's Accelerate-style flags and program, already as assignments located at their
  // flag; the command-line layer, before set_overrides (a disagreement is "set twice").
  std::vector<Assignment> flag_assignments;
  Environment environment;                // usually accel_environment()
  bool check_paths = true;                // data files exist, output dirs creatable
  // accel launch: this machine's GPUs, to resolve device: auto and num_processes (placement.hpp)
  // before validation; unset (config validate): the job is checked as written.
  std::optional<GpuCount> gpus_here;
};

struct LoadedJob {
  JobConfig job;
  std::map<std::string, Location> sources;  // every key -> where its value came from
  std::vector<Diagnostic> warnings;         // keys with no effect, neutral values ignored
  std::vector<std::string> notes;
  FileFormat format = FileFormat::None;
  std::string file;
  BackendTranslation translation;           // what was carried over from the other backend's block

  bool is_explicit(const std::string& path) const;  // set by a file, environment or command line
};

// Throws ConfigError with every problem found.
LoadedJob load_job(const LoadOptions& options);

// Format of a parsed file, from its keys: Accelerate files have distributed_type /
// compute_environment; DeepSpeed JSON has zero_optimization, train_batch_size, ...
FileFormat detect_format(const YAML::Node& root, const std::string& file);

}  // namespace accel::config
