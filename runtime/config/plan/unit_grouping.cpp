// Unit groupings for the wrap policies (see unit_grouping.hpp).
#include "runtime/config/plan/unit_grouping.hpp"

#include "runtime/common/strings.hpp"

namespace accel::plan {

UnitGroups one_group_per_unit(int units) {
  UnitGroups groups;
  for (int u = 0; u < units; ++u) groups.push_back({u});
  return groups;
}

UnitGroups one_group_for_all(int units) {
  UnitGroups groups(1);
  for (int u = 0; u < units; ++u) groups[0].push_back(u);
  return groups;
}

UnitGroups group_by_size(const std::vector<int64_t>& unit_numels, int64_t min_numel) {
  const int n = int(unit_numels.size());
  UnitGroups groups;
  if (n == 0) return groups;
  groups.push_back({0});
  std::vector<int> open;
  int64_t open_numel = 0;
  for (int u = 1; u < n; ++u) {
    open.push_back(u);
    open_numel += unit_numels[size_t(u)];
    if (open_numel >= min_numel) {
      groups.push_back(open);
      open.clear();
      open_numel = 0;
    }
  }
  for (int u : open) groups[0].push_back(u);  // the tail below the bound: the root keeps it
  return groups;
}

UnitGroups group_by_bucket(const std::vector<int64_t>& unit_numels, int64_t bucket_numel) {
  UnitGroups backwards;  // buckets from the last unit down
  int64_t filled = 0;
  for (int u = int(unit_numels.size()) - 1; u >= 0; --u) {
    const int64_t n = unit_numels[size_t(u)];
    if (backwards.empty() || filled + n > bucket_numel) {
      backwards.push_back({});
      filled = 0;
    }
    backwards.back().insert(backwards.back().begin(), u);
    filled += n;
  }
  return UnitGroups(backwards.rbegin(), backwards.rend());
}

std::string group_name(const std::vector<std::string>& member_names) { return join(member_names, "+"); }

UnitGroups groups_for_wrap_policy(config::AutoWrapPolicy policy, int64_t min_num_params,
                                  const std::vector<int64_t>& unit_numels) {
  switch (policy) {
    case config::AutoWrapPolicy::NO_WRAP: return one_group_for_all(int(unit_numels.size()));
    case config::AutoWrapPolicy::SIZE_BASED_WRAP: return group_by_size(unit_numels, min_num_params);
    case config::AutoWrapPolicy::TRANSFORMER_BASED_WRAP: break;
  }
  return one_group_per_unit(int(unit_numels.size()));
}

}  // namespace accel::plan
