// Loading a job in a test: the loader with a file, --set items and an environment, and the text of
// the ConfigError a load throws.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "runtime/common/errors.hpp"
#include "runtime/config/job_loader.hpp"

namespace accel::test {

inline config::LoadedJob load(const std::string& file, std::vector<std::string> sets = {},
                              config::Environment env = {}) {
  config::LoadOptions o;
  o.file = file;
  o.set_overrides = std::move(sets);
  o.environment = std::move(env);
  return config::load_job(o);
}

// What `f` throws as a ConfigError, or "(no error)".
inline std::string error_text(const std::function<void()>& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace accel::test
