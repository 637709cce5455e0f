#include "backends/core/sharded_engine.hpp"

#include <ATen/core/grad_mode.h>
#include <ATen/native/Resize.h>

#include <sstream>

#include "backends/core/checkpoint_reshard.hpp"
#include "backends/core/model_replicas.hpp"
#include "runtime/common/errors.hpp"
#include "runtime/train/model/safetensors.hpp"
#include "runtime/train/optim/grad_clip.hpp"
#include "runtime/train/optim/optimizer.hpp"

namespace accel::backends {
namespace {

// Frees or re-allocates a flat buffer's memory while every view of it stays valid (FSDP's
// storage resize): the views hold the storage, not the data pointer.
void resize_storage(const at::Tensor& t, size_t bytes) {
  at::native::resize_bytes_cpu(t.storage().unsafeGetStorageImpl(), bytes);
}

// Tags of backward signals: which unit, and whether it fires before (gather) or after its backward.
int64_t tag_of(int u, bool pre_backward) { return int64_t(u) * 2 + (pre_backward ? 1 : 0); }

// Name and shape of the parameters params[indices] (a unit's, in flat order), for checkpoints.
std::vector<ParamRecord> param_records(const train::NamedTensors& params, const std::vector<int>& indices) {
  std::vector<ParamRecord> out;
  for (int i : indices) out.push_back({params[size_t(i)].first, params[size_t(i)].second.sizes().vec(),
                                       params[size_t(i)].second.numel()});
  return out;
}

}  // namespace

ShardedEngine::ShardedEngine(const config::JobConfig& job, comm::Communicator& comm, train::Model& model,
                             ShardingPolicy policy)
    : comm_(comm), policy_(std::move(policy)), params_(model.named_parameters()) {
  if (policy_.shard_params) policy_.shard_grads = true;
  if (params_.empty()) throw RunError(policy_.label + ": the model has no parameters");
  if (!params_[0].second.device().is_cpu())
    throw RunError(policy_.label + ": the sharding engine runs on CPU tensors only so far (the GPU issue adds CUDA)");
  if (params_[0].second.scalar_type() != at::kFloat)
    throw RunError(policy_.label + ": only fp32 parameters so far (model.dtype fp32); bf16 comes with mixed precision");
  broadcast_parameters(comm_, params_);
  at::NoGradGuard no_grad;
  optimizer_ = std::make_unique<ShardedOptimizer>(job.optimizer, comm_.rank());
  std::vector<train::Unit*> units = model.units();
  std::vector<std::vector<int>> unit_params = unit_parameter_indices(model, policy_.label);
  for (size_t u = 0; u < units.size(); ++u) {
    train::Unit* unit = units[u];
    UnitRuntime rt;
    rt.unit = unit;
    rt.params = unit_params[u];
    std::vector<int64_t> numels;
    std::vector<bool> decay;
    for (int index : rt.params) {
      numels.push_back(params_[size_t(index)].second.numel());
      decay.push_back(train::applies_weight_decay(params_[size_t(index)].second));
    }
    FlatLayout layout(numels, comm_.size());
    at::Tensor flat = at::zeros({layout.padded_numel()}, at::kFloat);
    for (size_t k = 0; k < rt.params.size(); ++k)
      flat.narrow(0, layout.param_offset(int(k)), layout.param_numel(int(k))).copy_(params_[size_t(rt.params[k])].second.reshape(-1));
    optimizer_->add_unit(unit->unit_name(), layout, decay,
                         flat.narrow(0, int64_t(comm_.rank()) * layout.shard_numel(), layout.shard_numel()));
    if (policy_.shard_params) {
      rt.full = flat;  // becomes the parameters' storage
      for (size_t k = 0; k < rt.params.size(); ++k) {
        at::Tensor& p = params_[size_t(rt.params[k])].second;
        p.set_data(flat.narrow(0, layout.param_offset(int(k)), layout.param_numel(int(k))).view(p.sizes()));
      }
      rt.gathered = true;
    } else if (!policy_.shard_grads) {
      rt.grad_flat = at::zeros({layout.padded_numel()}, at::kFloat);
      for (size_t k = 0; k < rt.params.size(); ++k) {
        at::Tensor& p = params_[size_t(rt.params[k])].second;
        p.mutable_grad() = rt.grad_flat.narrow(0, layout.param_offset(int(k)), layout.param_numel(int(k))).view(p.sizes());
      }
    }
    unit_index_[unit] = int(units_.size());
    units_.push_back(std::move(rt));
  }
  release_all();
}

std::string ShardedEngine::describe() const {
  std::ostringstream s;
  int64_t numel = 0, padded = 0;
  for (auto& u : optimizer_->units()) {
    numel += u.layout.numel();
    padded += u.layout.padded_numel();
  }
  s << policy_.label << ": " << units_.size() << " units, " << numel << " values (" << padded - numel
    << " padding) in " << comm_.size() << " shards; sharded: optimizer states + fp32 master"
    << (policy_.shard_grads ? ", gradients" : "") << (policy_.shard_params ? ", parameters" : "")
    << "; reductions " << (policy_.overlap_comm ? "overlap backward" : "after backward");
  return s.str();
}

void ShardedEngine::gather(int u) {
  UnitRuntime& rt = units_[size_t(u)];
  if (!policy_.shard_params || rt.gathered) return;
  resize_storage(rt.full, size_t(rt.full.numel()) * rt.full.element_size());
  comm_.all_gather(shard(u).master, rt.full)->wait();
  rt.gathered = true;
}

void ShardedEngine::release(int u) {
  UnitRuntime& rt = units_[size_t(u)];
  if (!policy_.shard_params || !rt.gathered) return;
  resize_storage(rt.full, 0);
  rt.gathered = false;
}

void ShardedEngine::release_all() {
  for (size_t u = 0; u < units_.size(); ++u) release(int(u));
}

train::UnitHooks* ShardedEngine::begin_micro_step(int /*micro_step*/, bool sync) {
  eval_ = false;
  reducing_ = policy_.shard_grads || sync;
  for (auto& rt : units_) {
    rt.uses = rt.fired = 0;
    rt.reduced = false;
  }
  return (reducing_ || policy_.shard_params) ? this : nullptr;
}

train::UnitHooks* ShardedEngine::eval_hooks() {
  if (!policy_.shard_params) return nullptr;
  eval_ = true;
  return this;
}

at::Tensor ShardedEngine::pre_forward(train::Unit& unit, at::Tensor x) {
  int u = unit_index_.at(&unit);
  UnitRuntime& rt = units_[size_t(u)];
  if (!x.is_floating_point()) {
    rt.token_input = true;  // the embedding's first use: it is used again (unembed) at the end
    if (eval_)
      for (auto& other : units_) other.eval_uses = 0;  // a new forward starts
  }
  ++rt.eval_uses;
  gather(u);
  if (eval_ || !reducing_ || !x.requires_grad()) return x;
  ++rt.uses;
  return signal_after_backward(x, this, tag_of(u, false));
}

at::Tensor ShardedEngine::post_forward(train::Unit& unit, at::Tensor y) {
  int u = unit_index_.at(&unit);
  UnitRuntime& rt = units_[size_t(u)];
  if (!policy_.shard_params) return y;
  if (eval_) {
    if (!rt.token_input || rt.eval_uses >= 2) release(u);
    return y;
  }
  // The token-input unit stays gathered through the micro-step (it is needed again at the end).
  if (!rt.token_input) release(u);
  return signal_after_backward(y, this, tag_of(u, true));
}

void ShardedEngine::on_backward(int64_t tag) {
  int u = int(tag / 2);
  UnitRuntime& rt = units_[size_t(u)];
  if (tag % 2 == 1) {  // before the unit's backward: its parameters are needed again
    gather(u);
    return;
  }
  if (++rt.fired < rt.uses || rt.token_input) return;  // the token-input unit finishes after backward()
  if (policy_.overlap_comm) reduce_unit(u);
  if (policy_.shard_grads) release(u);
}

void ShardedEngine::reduce_unit(int u) {
  UnitRuntime& rt = units_[size_t(u)];
  if (rt.reduced) return;
  rt.reduced = true;
  UnitShardState& st = shard(u);
  PendingReduce pr{u, {}, {}, false, {}};
  if (!policy_.shard_grads) {
    pr.input = rt.grad_flat;  // accumulated over the micro-steps in place
    pr.output = st.grad;
  } else {
    pr.input = at::zeros({st.layout.padded_numel()}, at::kFloat);
    for (size_t k = 0; k < rt.params.size(); ++k) {
      at::Tensor& p = params_[size_t(rt.params[k])].second;
      if (p.grad().defined())
        pr.input.narrow(0, st.layout.param_offset(int(k)), st.layout.param_numel(int(k))).copy_(p.grad().reshape(-1));
      p.mutable_grad() = at::Tensor();  // the full gradient is no longer kept (stage 2/3 memory)
    }
    pr.output = at::empty({st.layout.shard_numel()}, at::kFloat);
    pr.accumulate = true;
  }
  pr.work = comm_.reduce_scatter(pr.input, pr.output, comm::ReduceOp::Avg);
  pending_.push_back(std::move(pr));
}

void ShardedEngine::wait_reductions() {
  for (auto& pr : pending_) {
    pr.work->wait();
    if (pr.accumulate) shard(pr.unit).grad.add_(pr.output);
  }
  pending_.clear();
}

void ShardedEngine::end_micro_step(bool /*sync*/) {
  if (reducing_) {
    // What did not reduce during backward (the token-input unit; everything without overlap_comm),
    // in reverse unit order, the same on every rank.
    for (size_t u = units_.size(); u-- > 0;) reduce_unit(int(u));
    wait_reductions();
  }
  release_all();
}

double ShardedEngine::clip_grad_norm(double max_norm) {
  std::vector<at::Tensor> grads;
  for (auto& st : optimizer_->units()) grads.push_back(st.grad);
  return train::clip_grad_norm(grads, max_norm, [this](double local) {
    at::Tensor t = at::tensor({local}, at::kDouble);
    comm_.all_reduce(t, comm::ReduceOp::Sum)->wait();
    return t.item<double>();
  });
}

void ShardedEngine::refresh_replicated_params() {
  at::NoGradGuard no_grad;
  for (size_t u = 0; u < units_.size(); ++u) {
    UnitShardState& st = shard(int(u));
    at::Tensor full = at::empty({st.layout.padded_numel()}, at::kFloat);
    comm_.all_gather(st.master, full)->wait();
    for (size_t k = 0; k < units_[u].params.size(); ++k) {
      at::Tensor& p = params_[size_t(units_[u].params[k])].second;
      p.copy_(full.narrow(0, st.layout.param_offset(int(k)), st.layout.param_numel(int(k))).view(p.sizes()));
    }
  }
}

void ShardedEngine::optimizer_step(double lr) {
  optimizer_->step(lr);
  optimizer_->zero_grads();
  for (auto& rt : units_)
    if (rt.grad_flat.defined()) rt.grad_flat.zero_();
  if (policy_.shard_params)
    release_all();  // the next gather reads the updated master shards
  else
    refresh_replicated_params();
}

train::NamedTensors ShardedEngine::full_parameters() {
  train::NamedTensors out;
  for (size_t u = 0; u < units_.size(); ++u) {
    bool was = units_[u].gathered;
    gather(int(u));
    for (int i : units_[u].params) out.emplace_back(params_[size_t(i)].first, params_[size_t(i)].second.detach().clone());
    if (!was) release(int(u));
  }
  return out;
}

// Checkpoints (docs/design/0006): each rank writes its own shard file and nothing else, no
// gather; rank 0's layout record names every parameter's place in the flat buffers, so
// merge-weights and a resume at another world size or under another backend can read them.
nlohmann::json ShardedEngine::save_state(const std::string& dir) {
  train::save_safetensors(dir + "/" + zero_shard_file(comm_.rank()), optimizer_->state_tensors());
  std::vector<ZeroUnitRecord> records;
  for (size_t u = 0; u < units_.size(); ++u)
    records.push_back({shard(int(u)).unit, shard(int(u)).layout, param_records(params_, units_[u].params)});
  return zero_layout_json(policy_.label, comm_.size(), records, shard_state_kinds(shard(0)));
}

void ShardedEngine::load_state(const std::string& dir, const nlohmann::json& layout) {
  bool own_shards = layout.value("layout", "") == "zero" && layout.value("world_size", 0) == comm_.size() &&
                    layout.contains("units") && layout["units"].size() == units_.size();
  for (size_t u = 0; own_shards && u < units_.size(); ++u)
    own_shards = layout["units"][u].value("unit", "") == shard(int(u)).unit &&
                 layout["units"][u].value("numel", int64_t(-1)) == shard(int(u)).layout.numel();
  if (own_shards) {  // same layout: this rank's file is its shard, as written
    std::string file = dir + "/" + zero_shard_file(comm_.rank());
    optimizer_->load_state(train::load_safetensors(file), file);
  } else {  // another world size or backend: reslice from the canonical form
    std::vector<std::vector<ParamRecord>> unit_params;
    for (const auto& rt : units_) unit_params.push_back(param_records(params_, rt.params));
    restore_shards(*CanonicalState::open(dir, layout), optimizer_->units(), unit_params, policy_.label);
  }
  if (policy_.shard_params)
    release_all();
  else
    refresh_replicated_params();
}

}  // namespace accel::backends
