// Which model units share one engine unit: FSDP's auto-wrap policy in accel's terms. An engine unit
// is one flat buffer, gathered, released and reduce-scattered as a whole; the model's units
// (docs/design/0003) are the finest grain.
// Invariants of every grouping: each model unit is in exactly one group; members of a group are
// ascending; groups are ordered by their first member; group 0 holds model unit 0 (the embedding,
// which takes the token ids and is used again by the tied head), so it is FSDP's root unit.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/config/enums.hpp"

namespace accel::plan {

using UnitGroups = std::vector<std::vector<int>>;

// TRANSFORMER_BASED_WRAP with the model's layer class: every model unit is its own engine unit.
UnitGroups one_group_per_unit(int units);

// NO_WRAP: one engine unit holds the whole model (gathered for the whole micro-step).
UnitGroups one_group_for_all(int units);

// SIZE_BASED_WRAP: after the root (unit 0), consecutive units are wrapped together as soon as they
// hold at least `min_numel` values; what is left at the end (fewer values) stays in the root, as
// FSDP's root module keeps every parameter no wrapped child holds. A unit at or above the bound
// is a group of its own.
UnitGroups group_by_size(const std::vector<int64_t>& unit_numels, int64_t min_numel);

// DeepSpeed stages 1-2 (reduce_bucket_size): consecutive units packed into buckets of at most
// `bucket_numel` values, filled from the last unit backward (the order their gradients are ready
// in), so the bucket that closes first is reduced while backward goes on and the one holding the
// embedding (ready last) goes out at the end. A unit above the bound is a bucket of its own. One
// collective per bucket instead of one per unit: small units cost a collective's latency each.
UnitGroups group_by_bucket(const std::vector<int64_t>& unit_numels, int64_t bucket_numel);

// The groups an fsdp.auto_wrap_policy asks for, over the model units' sizes: what the fsdp backend
// builds and what `accel estimate-memory` counts for the FSDP rows.
UnitGroups groups_for_wrap_policy(config::AutoWrapPolicy policy, int64_t min_num_params,
                                  const std::vector<int64_t>& unit_numels);

// "h.0" for one member, "h.0+h.1+h.2" for several: the engine unit's name in logs, traces and the
// checkpoint's layout record.
std::string group_name(const std::vector<std::string>& member_names);

}  // namespace accel::plan
