// The unit groupings live with the resolved plan (runtime/config/plan/unit_grouping.hpp); the
// engine's code names them here.
#pragma once

#include "runtime/config/plan/unit_grouping.hpp"

namespace accel::engine {
using plan::group_by_bucket;
using plan::group_by_size;
using plan::group_name;
using plan::groups_for_wrap_policy;
using plan::one_group_for_all;
using plan::one_group_per_unit;
using plan::UnitGroups;
}  // namespace accel::engine
