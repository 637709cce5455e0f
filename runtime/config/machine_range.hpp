// `num_machines: MIN:MAX`, torchrun's --nnodes form of an elastic job (docs/design/0027): one value
// that sets two keys, min_machines = MIN and num_machines = MAX, from any layer (file, ACCEL_*,
// --set). Invariant: a range either becomes exactly those two assignments, at the range's own
// location, or one error at num_machines that names the form and a fix; nothing else is touched.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "runtime/config/assignment.hpp"

namespace accel::config {

struct MachineRange {
  int min = 1;
  int max = 1;
};

// Parses "MIN:MAX" with 1 <= MIN <= MAX <= `limit`. On a bad text returns nullopt and sets *problem
// to what is wrong with it (one line).
std::optional<MachineRange> parse_machine_range(const std::string& text, int limit, std::string* problem);

// True when `a` writes num_machines as a range (a scalar with a ':').
bool is_machine_range(const Assignment& a);

// The min_machines and num_machines assignments a range stands for; empty, with an error pushed,
// when the range is malformed.
std::vector<Assignment> expand_machine_range(const Assignment& a, std::vector<Diagnostic>& errors);

}  // namespace accel::config
