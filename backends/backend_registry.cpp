// The backend registry: `backend:` value -> engine. A new backend is one folder and one line here.
// deepspeed maps zero_stage onto the engines: 0 is plain data parallelism (the ddp engine, with
// reduce_bucket_size as its bucket), 1-3 the sharding engine with DeepSpeed's partitioning.
#include "backends/backend.hpp"
#include "backends/core/sharded_engine.hpp"
#include "backends/ddp/ddp_backend.hpp"
#include "runtime/common/errors.hpp"

namespace accel::backends {
namespace {

std::unique_ptr<Backend> make_deepspeed(const config::JobConfig& job, comm::Communicator& comm, train::Model& model) {
  const auto& ds = job.deepspeed;
  if (ds.offload_optimizer_device != config::OffloadDevice::none || ds.offload_param_device != config::OffloadDevice::none)
    throw RunError("deepspeed offload (offload_optimizer_device / offload_param_device) is not built yet; set them to none");
  std::string label = "deepspeed zero_stage " + std::to_string(ds.zero_stage);
  if (ds.zero_stage == 0) {
    // reduce_bucket_size counts elements (DeepSpeed's unit); fp32 gradients are 4 bytes each.
    auto ddp = std::make_unique<DdpBackend>(job, comm, model, double(ds.reduce_bucket_size) * 4.0 / (1024.0 * 1024.0));
    ddp->set_label(label);
    return ddp;
  }
  ShardingPolicy policy;
  policy.label = label;
  policy.shard_grads = ds.zero_stage >= 2;
  policy.shard_params = ds.zero_stage >= 3;
  policy.overlap_comm = ds.overlap_comm;
  return std::make_unique<ShardedEngine>(job, comm, model, policy);
}

}  // namespace

std::unique_ptr<Backend> make_backend(const config::JobConfig& job, comm::Communicator& comm, train::Model& model) {
  switch (job.backend) {
    case config::Backend::ddp:
      return std::make_unique<DdpBackend>(job, comm, model, job.ddp.bucket_cap_mb);
    case config::Backend::deepspeed:
      return make_deepspeed(job, comm, model);
    default:
      throw RunError("backend: " + std::string(config::to_string(job.backend)) +
                     " is not implemented yet (the FSDP issue builds it); use backend: ddp or deepspeed");
  }
}

}  // namespace accel::backends
