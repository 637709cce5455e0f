// The resolved plan (runtime/config/plan) in the engines' terms: which engine the registry builds
// and, for the sharding engine, its ShardingPolicy over this model's units. The one mapping from a
// plan to an engine; no dialect has engine code of its own.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <vector>

#include "engine/sharded/sharded_engine.hpp"
#include "runtime/config/plan/resolved_plan.hpp"

namespace accel::engine {

at::ScalarType to_scalar_type(plan::Dtype dtype);

// The sharding engine's policy for `plan` over model units of `unit_numels` values (in order;
// `wrapped`: they are accel::Unit<> boundaries) on `world` ranks.
ShardingPolicy sharding_policy(const plan::ResolvedPlan& plan, const std::vector<int64_t>& unit_numels, bool wrapped,
                               int world);

}  // namespace accel::engine
