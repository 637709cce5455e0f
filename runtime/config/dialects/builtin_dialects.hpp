// The `backend:` dialects accel ships, one folder each (resolve_<name>.cpp): their mapping of the
// job onto the resolved plan (runtime/config/plan/resolve_plan.hpp).
#pragma once

#include <vector>

#include "runtime/config/plan/resolve_plan.hpp"

namespace accel::config::dialects {

void resolve_ddp(const plan::DialectInput& in, plan::ResolvedPlan& plan);
void resolve_deepspeed(const plan::DialectInput& in, plan::ResolvedPlan& plan);
void resolve_fsdp(const plan::DialectInput& in, plan::ResolvedPlan& plan);

// The registry's first entries, one line per dialect (builtin_dialects.cpp).
std::vector<plan::Dialect> builtin_dialects();

}  // namespace accel::config::dialects
