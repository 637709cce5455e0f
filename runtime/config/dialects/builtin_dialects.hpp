// The `backend:` dialects accel ships, one folder each (resolve_<name>.cpp): their mapping of the
// job onto the resolved plan (runtime/config/plan/resolve_plan.hpp).
#pragma once

#include <vector>

#include "runtime/config/plan/resolve_plan.hpp"

namespace accel::config::dialects {

plan::Dialect ddp_dialect();
plan::Dialect deepspeed_dialect();
plan::Dialect fsdp_dialect();

// The registry's first entries, one line per dialect (builtin_dialects.cpp).
std::vector<plan::Dialect> builtin_dialects();

}  // namespace accel::config::dialects
