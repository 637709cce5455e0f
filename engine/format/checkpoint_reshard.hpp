// Resuming a backend from a checkpoint of any layout and world size (docs/design/0006): fills
// the sharding engine's shards, or the replicated parameters and optimizer, from the canonical
// form (canonical_state.hpp). Rank r of a new zero layout is rebuilt segment by segment
// (FlatLayout::segments), each segment read from wherever the checkpoint keeps it.
// Memory bound: a rank reads one segment (a piece of one parameter inside its own shard) at a
// time into the shard it will keep, and a replicated backend one parameter at a time: never a
// whole unit, let alone the whole model, beyond what the backend holds anyway.
// Invariants: every check runs before the first value is written (the same parameter names and
// shapes on both sides, the same optimizer state kinds, one step count per unit): a mismatch is a
// RunError naming the difference that changes nothing; padding is zero afterwards; step counts
// carry over (the sharded step of a unit is the common step of its parameters).
#pragma once

#include <deque>
#include <string>
#include <vector>

#include "engine/format/canonical_state.hpp"
#include "engine/optim/optimizer.hpp"
#include "engine/sharded/sharded_optimizer.hpp"

namespace accel::engine {

// The optimizer state kinds a unit shard keeps ({exp_avg, exp_avg_sq}, {momentum} or {}).
std::vector<std::string> shard_state_kinds(const UnitShardState& unit);

// Fills this rank's shard of every unit of `units` (master, moments, step) from `source`.
// unit_params[u] lists unit u's parameters in flat order. `who` prefixes errors ("deepspeed zero_stage 2").
void restore_shards(const CanonicalState& source, std::deque<UnitShardState>& units,
                    const std::vector<std::vector<ParamRecord>>& unit_params, const std::string& who);

// Copies the weights from `source` into `params` (spec names) and restores `optimizer` (built
// over those params): moments, per-parameter steps and the step count.
void restore_replicated(const CanonicalState& source, const NamedTensors& params, Optimizer& optimizer,
                        const std::string& who);

}  // namespace accel::engine
