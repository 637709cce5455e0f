// Start-up steps every backend shares: make the replicas identical (rank 0's values win, DDP's
// constructor broadcast; every rank initialised from the same seed or file, so this is a safety net)
// and describe a built-in model as the engines' units (unit_spec.hpp).
// Invariant: model_unit_specs lists every parameter exactly once, in unit order (it throws RunError
// otherwise), which is what makes unit-level hooks cover the whole model.
#pragma once

#include <string>
#include <vector>

#include "backends/core/unit_spec.hpp"
#include "runtime/comm/communicator.hpp"
#include "runtime/train/model/model.hpp"

namespace accel::backends {

// Collective: broadcasts every parameter from rank 0, in order.
void broadcast_parameters(comm::Communicator& comm, const train::NamedTensors& params);

// The built-in model's units: one per model unit, in forward order, under the spec names; the
// embedding (unit 0, used again as the tied head) pinned; parameter groups by the spec's
// weight-decay rule (train::builtin_param_group).
std::vector<UnitSpec> model_unit_specs(train::Model& model);

}  // namespace accel::backends
