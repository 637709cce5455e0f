// Builds a JobConfig from layered assignments, recording where every value came from.
// Invariants: every key has a source (default until assigned); a later layer overrides an earlier
// one; two assignments in the same layer that disagree are an error naming both places (a key and
// its DeepSpeed alias, or a job file and the DeepSpeed JSON it names).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "runtime/config/assignment.hpp"
#include "runtime/config/schema.hpp"

namespace accel::config {

// Parses a node against a key's type and range. On failure appends a diagnostic and returns nullopt.
std::optional<Value> parse_value(const FieldSpec& field, const YAML::Node& node, const Location& where,
                                 std::vector<Diagnostic>& errors);

class JobBuilder {
 public:
  JobBuilder();

  // Applies one assignment. Unknown paths, bad values and same-layer conflicts become errors.
  void apply(const Assignment& assignment, Layer layer);
  // Sets a value computed from others (for example a batch size derived from train_batch_size).
  // `from_file`: the file the value was read from (a model folder's config.json); a job written
  // back out leaves such a value out, since reading that file again derives it.
  void derive(const std::string& path, const Value& value, const std::string& how, const std::string& from_file = "");

  JobConfig& job() { return job_; }
  const JobConfig& job() const { return job_; }
  const std::map<std::string, Location>& sources() const { return sources_; }
  Layer layer_of(const std::string& path) const;
  std::vector<Diagnostic>& errors() { return errors_; }

 private:
  JobConfig job_;
  std::map<std::string, Location> sources_;
  std::map<std::string, Layer> layers_;
  std::map<std::string, Value> layer_values_;  // value set in the current top layer, for conflicts
  std::vector<Diagnostic> errors_;
};

}  // namespace accel::config
