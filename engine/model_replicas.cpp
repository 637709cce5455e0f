#include "engine/model_replicas.hpp"

#include <ATen/core/grad_mode.h>

namespace accel::backends {

void broadcast_parameters(comm::Communicator& comm, const train::NamedTensors& params) {
  at::NoGradGuard no_grad;
  for (const auto& [name, p] : params) comm.broadcast(p, 0)->wait();
}

}  // namespace accel::backends
