#include "api/torch_optimizer_groups.hpp"

#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <unordered_map>
#include <unordered_set>

#include "runtime/common/errors.hpp"

namespace accel::api {
namespace {

// One param group's current options as the engines' hyper-parameters (read at every step, so a
// user's scheduler acts). `where` names the group in errors.
engine::GroupHyper group_hyper(TorchOptimizerKind kind, torch::optim::OptimizerOptions& options, const std::string& where) {
  engine::GroupHyper h;
  switch (kind) {
    case TorchOptimizerKind::adamw: {
      auto& o = static_cast<torch::optim::AdamWOptions&>(options);
      if (o.amsgrad()) throw RunError("accel: " + where + ": AdamW with amsgrad is not supported");
      h.lr = o.lr();
      h.beta1 = std::get<0>(o.betas());
      h.beta2 = std::get<1>(o.betas());
      h.eps = o.eps();
      h.weight_decay = o.weight_decay();
      return h;
    }
    case TorchOptimizerKind::adam: {
      auto& o = static_cast<torch::optim::AdamOptions&>(options);
      if (o.amsgrad()) throw RunError("accel: " + where + ": Adam with amsgrad is not supported");
      if (o.weight_decay() != 0)
        throw RunError("accel: " + where + ": Adam's weight_decay (L2 added to the gradient) is not supported; use "
                       "torch::optim::AdamW (decoupled decay), or weight_decay 0");
      h.lr = o.lr();
      h.beta1 = std::get<0>(o.betas());
      h.beta2 = std::get<1>(o.betas());
      h.eps = o.eps();
      return h;
    }
    case TorchOptimizerKind::sgd: {
      auto& o = static_cast<torch::optim::SGDOptions&>(options);
      if (o.dampening() != 0 || o.nesterov())
        throw RunError("accel: " + where + ": SGD with dampening or nesterov is not supported");
      h.lr = o.lr();
      h.momentum = o.momentum();
      h.weight_decay = o.weight_decay();
      return h;
    }
  }
  return h;
}

}  // namespace

// The torch optimizer's type, refusing what accel's kernels do not implement.
TorchOptimizerKind torch_optimizer_kind(torch::optim::Optimizer& optimizer) {
  if (dynamic_cast<torch::optim::AdamW*>(&optimizer)) return TorchOptimizerKind::adamw;
  if (dynamic_cast<torch::optim::Adam*>(&optimizer)) return TorchOptimizerKind::adam;
  if (dynamic_cast<torch::optim::SGD*>(&optimizer)) return TorchOptimizerKind::sgd;
  throw RunError("accel: prepare() supports torch::optim::AdamW, Adam (weight_decay 0) and SGD; this optimizer is "
                 "none of them (accel steps the shards with its own AdamW and SGD kernels)");
}

PreparedGroups prepared_groups(TorchOptimizerKind kind, torch::optim::Optimizer& optimizer, torch::nn::Module& model) {
  PreparedGroups out;
  engine::OptimizerSetup& setup = out.setup;
  auto& group_of = out.group_of;
  setup.kind = kind == TorchOptimizerKind::sgd ? config::OptimizerName::sgd : config::OptimizerName::adamw;
  // A module used twice (a tied weight) appears twice in libtorch's parameters(), so one group may
  // list a tensor twice: it is one parameter, stepped once. Two groups naming it is a real conflict.
  std::unordered_map<const void*, std::string> name_of;
  for (const auto& p : model.named_parameters(/*recurse=*/true)) name_of.emplace(p.value().unsafeGetTensorImpl(), p.key());
  auto& groups = optimizer.param_groups();
  for (size_t g = 0; g < groups.size(); ++g) {
    setup.groups.push_back(group_hyper(kind, groups[g].options(), "param group " + std::to_string(g)));
    for (const auto& p : groups[g].params()) {
      auto [it, added] = group_of.emplace(p.unsafeGetTensorImpl(), int(g));
      if (added || it->second == int(g)) continue;
      auto name = name_of.find(p.unsafeGetTensorImpl());
      throw RunError("accel: parameter '" + (name == name_of.end() ? std::string("(not in the module)") : name->second) +
                     "' is in two param groups of the optimizer (" + std::to_string(it->second) + " and " +
                     std::to_string(g) + "); a parameter takes one group's hyperparameters: keep it in one");
    }
  }
  std::unordered_set<const void*> in_model;
  for (const auto& p : model.named_parameters(/*recurse=*/true)) {
    in_model.insert(p.value().unsafeGetTensorImpl());
    if (p.value().requires_grad() && !group_of.count(p.value().unsafeGetTensorImpl()))
      throw RunError("accel: parameter '" + p.key() + "' takes gradients but is in no param group of the optimizer; "
                     "add it, or freeze it (requires_grad false)");
  }
  for (const auto& [impl, g] : group_of)
    if (!in_model.count(impl))
      throw RunError("accel: param group " + std::to_string(g) + " of the optimizer holds a tensor that is not a "
                     "parameter of the prepared module");
  return out;
}

std::vector<engine::GroupHyper> current_group_hypers(TorchOptimizerKind kind, torch::optim::Optimizer& optimizer,
                                                    size_t prepared) {
  auto& param_groups = optimizer.param_groups();
  if (param_groups.size() != prepared)
    throw RunError("accel: the optimizer has " + std::to_string(param_groups.size()) + " param groups, " +
                   std::to_string(prepared) + " when it was prepared");
  std::vector<engine::GroupHyper> groups;
  for (size_t g = 0; g < param_groups.size(); ++g)
    groups.push_back(group_hyper(kind, param_groups[g].options(), "param group " + std::to_string(g)));
  return groups;
}

}  // namespace accel::api
