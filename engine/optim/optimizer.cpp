// The replicated optimizer: per-parameter state, dispatch to the elementwise steps, checkpoint I/O.
// Invariant: load_state either restores everything or changes nothing.
#include "engine/optim/optimizer.hpp"

#include <ATen/core/grad_mode.h>
#include <map>
#include <set>
#include <stdexcept>

#include "engine/optim/adamw_fused.hpp"
#include "engine/optim/adamw_step.hpp"
#include "engine/optim/math_precision.hpp"
#include "engine/optim/sgd_step.hpp"
#include "runtime/common/errors.hpp"
#include "runtime/common/strings.hpp"

namespace accel::engine {

namespace {

at::Tensor scalar_int64(int64_t v) { return at::scalar_tensor(v, at::TensorOptions().dtype(at::kLong)); }

// The names a refusal lists: the first 5.
std::string first_names(const std::vector<std::string>& names) { return join_first(names, 5); }

}  // namespace

std::unique_ptr<Optimizer> Optimizer::make(const config::OptimizerSection& section, NamedTensors named_params) {
  OptimizerSetup setup = builtin_optimizer_setup(section);  // validates betas
  std::vector<int> group_of;
  for (const auto& [name, p] : named_params) group_of.push_back(p.defined() ? builtin_param_group(p.dim()) : 0);
  return make(setup, std::move(named_params), group_of);
}

std::unique_ptr<Optimizer> Optimizer::make(const OptimizerSetup& setup, NamedTensors named_params,
                                           const std::vector<int>& group_of) {
  return std::unique_ptr<Optimizer>(new Optimizer(setup, std::move(named_params), group_of));
}

Optimizer::Optimizer(const OptimizerSetup& setup, NamedTensors named_params, const std::vector<int>& group_of)
    : setup_(setup), params_(std::move(named_params)) {
  if (params_.empty()) throw std::invalid_argument("optimizer: no parameters to optimize");
  if (group_of.size() != params_.size()) throw std::invalid_argument("optimizer: one group index per parameter needed");
  std::set<std::string> seen;
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto& [name, p] = params_[i];
    if (group_of[i] < 0 || size_t(group_of[i]) >= setup_.groups.size())
      throw std::invalid_argument("optimizer: parameter '" + name + "' is in no group");
    if (!p.defined()) throw std::invalid_argument("optimizer: parameter '" + name + "' is undefined");
    if (!seen.insert(name).second) throw std::invalid_argument("optimizer: duplicate parameter name '" + name + "'");
    Slot s;
    s.name = name;
    s.param = p;
    s.group = group_of[i];
    const auto opts = p.options().dtype(optimizer_math_dtype(p.scalar_type())).requires_grad(false);
    if (setup_.kind == config::OptimizerName::adamw) {
      s.exp_avg = at::zeros(p.sizes(), opts);
      s.exp_avg_sq = at::zeros(p.sizes(), opts);
    } else if (setup_.keeps_momentum()) {
      s.momentum = at::zeros(p.sizes(), opts);
    }
    slots_.push_back(std::move(s));
  }
}

const NamedTensors& Optimizer::params() const { return params_; }

void Optimizer::step(const std::vector<GroupHyper>& groups) {
  if (groups.size() != setup_.groups.size())
    throw std::invalid_argument("optimizer: " + std::to_string(groups.size()) + " groups' hyper-parameters for " +
                                std::to_string(setup_.groups.size()) + " groups");
  const bool fused = setup_.fused && setup_.kind == config::OptimizerName::adamw;
  std::vector<AdamWBatch> batches(fused ? groups.size() : 0);  // one fused launch per group
  for (auto& s : slots_) {
    const at::Tensor& g = s.param.grad();
    if (!g.defined()) continue;
    const GroupHyper& h = groups[size_t(s.group)];
    if (fused && fused_adamw_applies(s.param, s.exp_avg))
      batches[size_t(s.group)].add(s.param, g, s.exp_avg, s.exp_avg_sq, s.step + 1);
    else if (setup_.kind == config::OptimizerName::adamw)
      adamw_step(s.param, g, s.exp_avg, s.exp_avg_sq, s.step + 1, h.adamw(), /*apply_decay=*/true);
    else
      sgd_step(s.param, g, s.momentum, s.step + 1, h.sgd(), /*apply_decay=*/true);
    ++s.step;
  }
  for (size_t g = 0; g < batches.size(); ++g) adamw_fused_step(batches[g], groups[g].adamw());
  ++step_count_;
}

void Optimizer::zero_grad() {
  at::NoGradGuard no_grad;
  for (auto& s : slots_) {
    const at::Tensor& g = s.param.grad();
    if (g.defined()) g.zero_();
  }
}

NamedTensors Optimizer::moment_tensors() const {
  NamedTensors out;
  for (const auto& s : slots_) {
    if (s.exp_avg.defined()) out.emplace_back("exp_avg." + s.name, s.exp_avg);
    if (s.exp_avg_sq.defined()) out.emplace_back("exp_avg_sq." + s.name, s.exp_avg_sq);
    if (s.momentum.defined()) out.emplace_back("momentum." + s.name, s.momentum);
  }
  return out;
}

NamedTensors Optimizer::state_tensors() const {
  NamedTensors out;
  out.emplace_back("step_count", scalar_int64(step_count_));
  for (const auto& s : slots_) out.emplace_back("step." + s.name, scalar_int64(s.step));
  for (auto& kt : moment_tensors()) out.push_back(std::move(kt));
  return out;
}

void Optimizer::load_state(const NamedTensors& state) {
  std::map<std::string, at::Tensor> given;
  std::vector<std::string> duplicates;
  for (const auto& [k, t] : state)
    if (!given.emplace(k, t).second) duplicates.push_back(k);
  if (!duplicates.empty()) throw RunError("optimizer state: duplicate keys: " + first_names(duplicates));

  // Expected keys with their reference tensors (shape and dtype to match).
  std::map<std::string, at::Tensor> expected;
  expected.emplace("step_count", scalar_int64(0));
  for (const auto& s : slots_) expected.emplace("step." + s.name, scalar_int64(0));
  const NamedTensors moments = moment_tensors();
  for (const auto& [key, t] : moments) expected.emplace(key, t);

  std::vector<std::string> missing, unexpected, bad;
  for (const auto& [k, ref] : expected) {
    auto it = given.find(k);
    if (it == given.end()) {
      missing.push_back(k);
      continue;
    }
    const at::Tensor& t = it->second;
    if (!t.defined() || t.sizes() != ref.sizes() || t.scalar_type() != ref.scalar_type())
      bad.push_back(k + " (expected " + c10::toString(ref.scalar_type()) + c10::str(ref.sizes()) + ", got " +
                    (t.defined() ? c10::toString(t.scalar_type()) + c10::str(t.sizes()) : std::string("undefined")) +
                    ")");
  }
  for (const auto& [k, t] : given)
    if (!expected.count(k)) unexpected.push_back(k);
  std::string why;
  if (!missing.empty()) why += "\n  missing: " + first_names(missing);
  if (!unexpected.empty()) why += "\n  unexpected: " + first_names(unexpected);
  if (!bad.empty()) why += "\n  wrong shape or dtype: " + first_names(bad);
  if (!why.empty())
    throw RunError("optimizer state does not fit this " + config::to_string(setup_.kind) +
                   " optimizer (was it saved for another model or optimizer?):" + why);

  at::NoGradGuard no_grad;
  step_count_ = given.at("step_count").item<int64_t>();
  for (auto& s : slots_) s.step = given.at("step." + s.name).item<int64_t>();
  for (const auto& [key, t] : moments) t.copy_(given.at(key));
}

}  // namespace accel::engine
