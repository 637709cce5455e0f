// Start-up steps every backend shares: make the replicas identical (rank 0's values win, DDP's
// constructor broadcast; every rank initialised from the same seed or file, so this is a safety net)
// and map each unit to the indices of its parameters in Model::named_parameters().
// Invariant: unit_parameter_indices lists every parameter exactly once, in unit order (it throws
// RunError naming `who` otherwise), which is what makes unit-level hooks cover the whole model.
#pragma once

#include <string>
#include <vector>

#include "runtime/comm/communicator.hpp"
#include "runtime/train/model/model.hpp"

namespace accel::backends {

// Collective: broadcasts every parameter from rank 0, in order.
void broadcast_parameters(comm::Communicator& comm, const train::NamedTensors& params);

// result[u] = indices of unit u's parameters in model.named_parameters().
std::vector<std::vector<int>> unit_parameter_indices(train::Model& model, const std::string& who);

}  // namespace accel::backends
