// What a plan makes of a model's units once their sizes are known: the engine units (which model
// units share one flat buffer) and the full-gradient values that may wait for their reduction.
// The engine registry builds exactly this; `accel estimate-memory` counts it.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/config/plan/resolved_plan.hpp"
#include "runtime/config/plan/unit_grouping.hpp"

namespace accel::plan {

struct EngineUnits {
  UnitGroups groups;                // model units per engine unit, in order
  int64_t reduce_bucket_numel = 0;  // 0: one unit's reduction at a time
};

// `unit_numels`: the model units' sizes in order; `wrapped`: they are accel::Unit<> boundaries (the
// wrap policy groups them; without, the module tree was cut by the policy already); `world`: ranks.
EngineUnits engine_units(const ResolvedPlan& plan, const std::vector<int64_t>& unit_numels, bool wrapped, int world);

}  // namespace accel::plan
