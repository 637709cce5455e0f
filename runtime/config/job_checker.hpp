// Collects the problems of a job's cross-key checks (validate.cpp and each dialect's check_block),
// each with the location of the key at fault and a note on the key it conflicts with.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "runtime/common/errors.hpp"
#include "runtime/config/job.hpp"
#include "runtime/config/schema.hpp"

namespace accel::config {

class JobChecker {
 public:
  JobChecker(const JobConfig& job, const std::map<std::string, Location>& sources, std::vector<Diagnostic>& errors,
          std::vector<Diagnostic>& warnings)
      : job_(job), sources_(sources), errors_(errors), warnings_(warnings) {}

  std::string value(const std::string& path) const { return value_to_yaml(find_field(path)->get(job_)); }
  Location where(const std::string& path) const { return sources_.at(path); }
  // "deepspeed.zero_stage is 2 (set at job.yaml:4:15)"
  std::string about(const std::string& path) const {
    return path + " is " + value(path) + " (" + (where(path).origin == Location::Origin::Default ? "the default" : "set at " + where(path).str()) + ")";
  }

  void error(const std::string& path, std::string message, std::string allowed, std::string hint) {
    errors_.push_back({path, where(path), std::move(message), value(path), std::move(allowed), std::move(hint)});
  }
  void warning(const std::string& path, std::string message, std::string hint) {
    warnings_.push_back({path, where(path), std::move(message), value(path), "", std::move(hint)});
  }
  bool is_set(const std::string& path) const { return where(path).origin != Location::Origin::Default; }

 private:
  const JobConfig& job_;
  const std::map<std::string, Location>& sources_;
  std::vector<Diagnostic>& errors_;
  std::vector<Diagnostic>& warnings_;
};

}  // namespace accel::config
