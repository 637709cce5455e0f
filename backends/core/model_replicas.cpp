#include "backends/core/model_replicas.hpp"

#include <ATen/core/grad_mode.h>

#include "runtime/common/errors.hpp"
#include "runtime/train/optim/param_groups.hpp"

namespace accel::backends {

void broadcast_parameters(comm::Communicator& comm, const train::NamedTensors& params) {
  at::NoGradGuard no_grad;
  for (const auto& [name, p] : params) comm.broadcast(p, 0)->wait();
}

std::vector<UnitSpec> model_unit_specs(train::Model& model) {
  std::vector<UnitSpec> out;
  size_t count = 0;
  for (train::Unit* unit : model.units()) {
    UnitSpec spec;
    spec.name = unit->unit_name();
    spec.params = unit->named_parameters_in_order();
    for (const auto& [name, p] : spec.params) spec.groups.push_back(train::builtin_param_group(p.dim()));
    spec.module = unit;
    spec.pinned = out.empty();  // the embedding: embeds the tokens first, is the tied head last
    count += spec.params.size();
    out.push_back(std::move(spec));
  }
  if (count != model.named_parameters().size()) throw RunError("model: its units do not list every parameter once");
  return out;
}

}  // namespace accel::backends
