// A start-up step every backend shares: make the replicas identical (rank 0's values win, DDP's
// constructor broadcast; every rank initialised from the same seed or file, so this is a safety net).
#pragma once

#include <string>
#include <vector>

#include "engine/unit_spec.hpp"
#include "runtime/comm/communicator.hpp"
#include "engine/named_tensors.hpp"

namespace accel::engine {

// Collective: broadcasts every parameter from rank 0, in order.
void broadcast_parameters(comm::Communicator& comm, const NamedTensors& params);

}  // namespace accel::engine
