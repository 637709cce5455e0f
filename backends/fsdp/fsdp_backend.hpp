// backend: fsdp, built from its plan (fsdp_policy.hpp): FULL_SHARD and SHARD_GRAD_OP run the
// sharding engine, NO_SHARD plain data parallelism (the ddp engine in fp32, replicated masters in
// the sharding engine with bf16 compute). Refusals in the plan are a RunError here (the launcher
// reports them earlier, as configuration errors).
#pragma once

#include <memory>

#include "backends/backend.hpp"

namespace accel::backends {

// Over a module prepared through the public API: with accel::Unit<> wrappers (units that name a
// module) the wrap policy groups consecutive units; without, one engine unit per spec (the caller
// applied the wrap policy to the module tree). plan_fsdp(job, user_module = true)'s refusals are a
// RunError. Activation checkpointing is the wrappers' (the caller's unit sink).
std::unique_ptr<Backend> make_fsdp_backend(const config::JobConfig& job, comm::Communicator& comm,
                                           std::vector<UnitSpec> units, const train::OptimizerSetup& optimizer);

}  // namespace accel::backends
