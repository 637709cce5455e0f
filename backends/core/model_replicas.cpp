#include "backends/core/model_replicas.hpp"

#include <ATen/core/grad_mode.h>

#include "runtime/common/errors.hpp"

namespace accel::backends {

void broadcast_parameters(comm::Communicator& comm, const train::NamedTensors& params) {
  at::NoGradGuard no_grad;
  for (const auto& [name, p] : params) comm.broadcast(p, 0)->wait();
}

std::vector<std::vector<int>> unit_parameter_indices(train::Model& model, const std::string& who) {
  std::vector<std::vector<int>> out;
  int index = 0;
  for (train::Unit* unit : model.units()) {
    out.emplace_back();
    for (size_t k = 0; k < unit->named_parameters_in_order().size(); ++k) out.back().push_back(index++);
  }
  if (index != int(model.named_parameters().size()))
    throw RunError(who + ": the model's units do not list every parameter once");
  return out;
}

}  // namespace accel::backends
