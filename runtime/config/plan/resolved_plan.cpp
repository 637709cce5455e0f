// Names of the plan's values, for logs, tests and the golden table (see resolved_plan.hpp).
#include "runtime/config/plan/resolved_plan.hpp"

namespace accel::plan {

std::string describe(const PlanIssue& issue) {
  std::string s = issue.key + (issue.value.empty() ? "" : " " + issue.value) + ": " + issue.message;
  if (!issue.allowed.empty()) s += " (allowed: " + issue.allowed + ")";
  if (!issue.hint.empty()) s += "; fix: " + issue.hint;
  return s;
}

const char* to_string(Engine e) { return e == Engine::replicated ? "replicated" : "sharded"; }

const char* to_string(Shards s) {
  switch (s) {
    case Shards::none: return "none";
    case Shards::optimizer: return "optimizer";
    case Shards::gradients: return "gradients";
    case Shards::parameters: return "parameters";
  }
  return "?";
}

const char* to_string(Dtype d) {
  switch (d) {
    case Dtype::fp32: return "fp32";
    case Dtype::bf16: return "bf16";
    case Dtype::fp16: return "fp16";
  }
  return "?";
}

const char* to_string(Where w) {
  switch (w) {
    case Where::device: return "device";
    case Where::cpu: return "cpu";
    case Where::nvme: return "nvme";
  }
  return "?";
}

const char* to_string(Grouping g) {
  switch (g) {
    case Grouping::per_unit: return "per_unit";
    case Grouping::by_bucket: return "by_bucket";
    case Grouping::wrap_policy: return "wrap_policy";
  }
  return "?";
}

const char* to_string(ReduceBucket r) {
  switch (r) {
    case ReduceBucket::none: return "none";
    case ReduceBucket::numel: return "numel";
    case ReduceBucket::two_largest_units: return "two_largest_units";
  }
  return "?";
}

}  // namespace accel::plan
