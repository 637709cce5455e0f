// backend: fsdp through the engine registry (backend.hpp's make_backend), whatever the job's
// backend: value says. The registry builds every dialect from its resolved plan.
#pragma once

#include <memory>

#include "engine/backend.hpp"

namespace accel::backends {

// Refusals are a RunError. Activation checkpointing is the wrappers' (the caller's unit sink).
std::unique_ptr<Backend> make_fsdp_backend(const config::JobConfig& job, comm::Communicator& comm,
                                           std::vector<UnitSpec> units, const train::OptimizerSetup& optimizer);

}  // namespace accel::backends
