// What an importer of a foreign config (Accelerate YAML, DeepSpeed JSON) produces: assignments for
// the file layer, errors for values accel cannot honour, warnings naming keys accel does not act on.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/config/assignment.hpp"

namespace accel::config {

// DeepSpeed's train_batch_size = micro_batch * accumulation * world size, checked (or used to
// derive whichever of the two was left "auto") once the world size is known.
struct BatchConstraint {
  int64_t train_batch_size = 0;
  Location where;
};

struct ImportResult {
  std::vector<Assignment> assignments;
  std::vector<Diagnostic> errors;
  std::vector<Diagnostic> warnings;
  std::vector<std::string> notes;  // informational: neutral keys ignored, ...
  // A foreign key set to "auto" and the accel key that then decides: its note is written once the
  // job is resolved, naming the value "auto" became and where that value came from.
  std::vector<std::pair<std::string, std::string>> auto_keys;
  std::optional<BatchConstraint> batch;
};

}  // namespace accel::config
