// backend: fsdp through the engine registry (see fsdp_backend.hpp).
#include "engine/fsdp/fsdp_backend.hpp"

namespace accel::backends {

std::unique_ptr<Backend> make_fsdp_backend(const config::JobConfig& job, comm::Communicator& comm,
                                           std::vector<UnitSpec> units, const train::OptimizerSetup& optimizer) {
  config::JobConfig fsdp_job = job;
  fsdp_job.backend = config::Backend::fsdp;
  return make_backend(fsdp_job, comm, std::move(units), optimizer);
}

}  // namespace accel::backends
