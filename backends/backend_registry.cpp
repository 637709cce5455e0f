// The backend registry: `backend:` value -> engine. A new backend is one folder and one line here.
#include "backends/backend.hpp"
#include "backends/ddp/ddp_backend.hpp"
#include "runtime/common/errors.hpp"

namespace accel::backends {

std::unique_ptr<Backend> make_backend(const config::JobConfig& job, comm::Communicator& comm, train::Model& model) {
  switch (job.backend) {
    case config::Backend::ddp:
      return std::make_unique<DdpBackend>(job, comm, model);
    default:
      throw RunError("backend: " + std::string(config::to_string(job.backend)) +
                     " is not implemented yet (the sharding issues build it); use backend: ddp");
  }
}

}  // namespace accel::backends
