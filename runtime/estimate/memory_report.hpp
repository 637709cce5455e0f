// Rendering of a job's memory estimate: the side-by-side table `accel estimate-memory` prints and
// the same figures as JSON (exact integer bytes). Torch-free.
// Invariant: the text and the JSON come from one JobEstimate; the table's device columns add up to
// its per-rank column, and every byte figure in the JSON is an exact integer.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "runtime/estimate/job_estimate.hpp"

namespace accel::estimate {

std::string render_memory_table(const JobEstimate& estimate);
nlohmann::json memory_estimate_json(const JobEstimate& estimate);

// "1,234,567"
std::string group_digits(int64_t value);

}  // namespace accel::estimate
