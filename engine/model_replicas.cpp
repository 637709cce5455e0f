#include "engine/model_replicas.hpp"

#include <ATen/core/grad_mode.h>

namespace accel::engine {

void broadcast_parameters(comm::Communicator& comm, const NamedTensors& params) {
  at::NoGradGuard no_grad;
  for (const auto& [name, p] : params) comm.broadcast(p, 0)->wait();
}

}  // namespace accel::engine
