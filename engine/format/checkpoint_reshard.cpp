// Filling a backend's state from the canonical form (see checkpoint_reshard.hpp).
#include "engine/format/checkpoint_reshard.hpp"

#include <ATen/core/grad_mode.h>

#include <map>
#include <set>

#include "runtime/common/errors.hpp"
#include "runtime/common/strings.hpp"

namespace accel::engine {
namespace {

// The names a refusal lists: the first 5.
std::string first_names(const std::vector<std::string>& names) { return join_first(names, 5); }

// The checkpoint holds exactly `want` (names and shapes) and the optimizer state kinds `kinds`.
void check_compatible(const CanonicalState& source, const std::vector<ParamRecord>& want,
                      const std::vector<std::string>& kinds, const std::string& who) {
  std::vector<std::string> missing, unexpected, reshaped;
  std::set<std::string> wanted;
  for (const auto& p : want) {
    wanted.insert(p.name);
    const ParamRecord* have = source.find(p.name);
    if (!have)
      missing.push_back(p.name);
    else if (have->shape != p.shape)
      reshaped.push_back(p.name + " " + shape_text(have->shape) + " (this model: " + shape_text(p.shape) + ")");
  }
  for (const auto& p : source.params())
    if (!wanted.count(p.name)) unexpected.push_back(p.name);
  std::string why;
  if (!missing.empty()) why += "\n  missing from the checkpoint: " + first_names(missing);
  if (!unexpected.empty()) why += "\n  not in this model: " + first_names(unexpected);
  if (!reshaped.empty()) why += "\n  other shapes: " + first_names(reshaped);
  if (!why.empty())
    throw RunError(who + ": checkpoint " + source.dir() + " (" + source.describe() +
                   ") was written for another model:" + why);
  if (std::set<std::string>(kinds.begin(), kinds.end()) !=
      std::set<std::string>(source.state_kinds().begin(), source.state_kinds().end()))
    throw RunError(who + ": checkpoint " + source.dir() + " holds optimizer state " +
                   describe_state_kinds(source.state_kinds()) + " but this run's optimizer keeps " +
                   describe_state_kinds(kinds) + "; resume with the optimizer that wrote it");
}

// The step every parameter of a unit shares (the sharded optimizer keeps one per unit).
int64_t unit_step(const CanonicalState& source, const std::string& unit, const std::vector<ParamRecord>& params,
                  const std::string& who) {
  int64_t step = source.step(params.front().name);
  for (const auto& p : params)
    if (source.step(p.name) != step)
      throw RunError(who + ": checkpoint " + source.dir() + ": the parameters of unit " + unit +
                     " have different step counts (" + params.front().name + " " + std::to_string(step) + ", " +
                     p.name + " " + std::to_string(source.step(p.name)) +
                     "); the sharded optimizer keeps one per unit, so it cannot resume this checkpoint");
  return step;
}

}  // namespace

std::vector<std::string> shard_state_kinds(const UnitShardState& unit) {
  if (unit.exp_avg.defined()) return {"exp_avg", "exp_avg_sq"};
  if (unit.momentum.defined()) return {"momentum"};
  return {};
}

void restore_shards(const CanonicalState& source, std::deque<UnitShardState>& units,
                    const std::vector<std::vector<ParamRecord>>& unit_params, const std::string& who) {
  if (units.size() != unit_params.size() || units.empty())
    throw RunError(who + ": restore_shards: " + std::to_string(units.size()) + " units but " +
                   std::to_string(unit_params.size()) + " parameter lists (internal error)");
  std::vector<ParamRecord> all;
  for (const auto& params : unit_params) all.insert(all.end(), params.begin(), params.end());
  const std::vector<std::string> kinds = shard_state_kinds(units.front());
  check_compatible(source, all, kinds, who);
  std::vector<int64_t> steps;
  for (size_t u = 0; u < units.size(); ++u) {
    if (unit_params[u].size() != size_t(units[u].layout.num_params()))
      throw RunError(who + ": unit " + units[u].unit + " has " + std::to_string(units[u].layout.num_params()) +
                     " parameters in its layout but " + std::to_string(unit_params[u].size()) + " records (internal error)");
    steps.push_back(unit_params[u].empty() ? 0 : unit_step(source, units[u].unit, unit_params[u], who));
  }

  at::NoGradGuard no_grad;
  for (size_t u = 0; u < units.size(); ++u) {
    UnitShardState& st = units[u];
    // Built with emplace_back: GCC 12 misreads an initializer list of pair<string, Tensor> here as
    // an out-of-bounds access (-Warray-bounds).
    std::vector<std::pair<std::string, at::Tensor>> targets;
    targets.reserve(4);
    targets.emplace_back(kParamKind, st.master);
    if (st.exp_avg.defined()) {
      targets.emplace_back("exp_avg", st.exp_avg);
      targets.emplace_back("exp_avg_sq", st.exp_avg_sq);
    }
    if (st.momentum.defined()) targets.emplace_back("momentum", st.momentum);
    for (auto& [kind, dst] : targets) {
      dst.zero_();  // padding
      for (const auto& seg : st.segments)
        dst.narrow(0, seg.shard_offset, seg.numel)
            .copy_(source.read(unit_params[u][size_t(seg.param)].name, kind, seg.param_offset, seg.numel));
    }
    st.step = steps[u];
  }
}

void restore_replicated(const CanonicalState& source, const NamedTensors& params, Optimizer& optimizer,
                        const std::string& who) {
  std::vector<ParamRecord> want;
  for (const auto& [name, p] : params) want.push_back({name, p.sizes().vec(), p.numel()});
  // The optimizer's state_tensors() alias its live moments: they are filled in place below, and
  // load_state then checks the whole set and sets the step counts (copying a moment onto itself).
  NamedTensors state = optimizer.state_tensors();
  std::vector<std::string> kinds;
  for (const char* kind : {"exp_avg", "exp_avg_sq", "momentum"})
    for (const auto& [key, t] : state)
      if (key.rfind(std::string(kind) + ".", 0) == 0) {
        kinds.push_back(kind);
        break;
      }
  check_compatible(source, want, kinds, who);

  at::NoGradGuard no_grad;
  for (const auto& [name, p] : params) p.copy_(source.read_full(name, kParamKind));
  for (auto& [key, t] : state) {
    if (key == "step_count") {
      t = at::scalar_tensor(source.step_count(), at::TensorOptions().dtype(at::kLong));
      continue;
    }
    const size_t dot = key.find('.');
    const std::string kind = key.substr(0, dot), name = key.substr(dot + 1);
    if (kind == "step")
      t = at::scalar_tensor(source.step(name), at::TensorOptions().dtype(at::kLong));
    else
      t.copy_(source.read_full(name, kind));
  }
  optimizer.load_state(state);
}

}  // namespace accel::engine
