// Loads a job file as the config tests need it: `--set` overrides, paths not checked on disk.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "runtime/config/job_loader.hpp"

namespace accel::test {

inline config::LoadedJob load_unchecked(const std::string& file, std::vector<std::string> sets = {}) {
  config::LoadOptions o;
  o.file = file;
  o.set_overrides = std::move(sets);
  o.check_paths = false;
  return config::load_job(o);
}

}  // namespace accel::test
