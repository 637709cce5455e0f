// The plan's engine units (see engine_units.hpp).
#include "runtime/config/plan/engine_units.hpp"

#include <algorithm>

namespace accel::plan {
namespace {

// The largest engine unit's flat buffer, padded to a multiple of the shard count: the gradients
// one unit holds while they are reduce-scattered.
int64_t largest_padded_unit(const UnitGroups& groups, const std::vector<int64_t>& numels, int shards) {
  int64_t largest = 0;
  for (const auto& group : groups) {
    int64_t n = 0;
    for (int u : group) n += numels[size_t(u)];
    largest = std::max(largest, (n + shards - 1) / shards * shards);
  }
  return largest;
}

}  // namespace

EngineUnits engine_units(const ResolvedPlan& plan, const std::vector<int64_t>& unit_numels, bool wrapped, int world) {
  EngineUnits out;
  const int units = int(unit_numels.size());
  switch (plan.grouping) {
    case Grouping::per_unit: out.groups = one_group_per_unit(units); break;
    case Grouping::by_bucket: out.groups = group_by_bucket(unit_numels, plan.group_numel); break;
    case Grouping::wrap_policy:
      out.groups = wrapped ? groups_for_wrap_policy(plan.wrap, plan.group_numel, unit_numels) : one_group_per_unit(units);
      break;
  }
  switch (plan.reduce_bucket) {
    case ReduceBucket::none: break;
    case ReduceBucket::numel: out.reduce_bucket_numel = plan.reduce_bucket_numel; break;
    case ReduceBucket::two_largest_units:
      out.reduce_bucket_numel =
          2 * largest_padded_unit(out.groups, unit_numels, plan.shard_group_size > 0 ? plan.shard_group_size : world);
      break;
  }
  return out;
}

}  // namespace accel::plan
