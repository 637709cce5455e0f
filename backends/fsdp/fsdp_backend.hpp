// backend: fsdp, built from its plan (fsdp_policy.hpp): FULL_SHARD and SHARD_GRAD_OP run the
// sharding engine, NO_SHARD plain data parallelism (the ddp engine in fp32, replicated masters in
// the sharding engine with bf16 compute). Refusals in the plan are a RunError here (the launcher
// reports them earlier, as configuration errors).
#pragma once

#include <memory>

#include "backends/backend.hpp"

namespace accel::backends {

std::unique_ptr<Backend> make_fsdp_backend(const config::JobConfig& job, comm::Communicator& comm, train::Model& model);

}  // namespace accel::backends
