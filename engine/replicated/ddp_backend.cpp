#include "engine/replicated/ddp_backend.hpp"

#include <ATen/core/grad_mode.h>

#include <cmath>
#include <sstream>

#include "engine/format/checkpoint_reshard.hpp"
#include "engine/format/safetensors.hpp"
#include "engine/model_replicas.hpp"
#include "engine/optim/grad_clip.hpp"
#include "runtime/common/errors.hpp"

namespace accel::engine {
namespace {

constexpr const char* kModelFile = "model.safetensors";
constexpr const char* kOptimizerFile = "optimizer.safetensors";

}  // namespace

DdpBackend::DdpBackend(comm::Communicator& comm, std::vector<UnitSpec> units, const OptimizerSetup& optimizer,
                       double bucket_cap_mb)
    : comm_(comm), bucket_cap_mb_(bucket_cap_mb) {
  check_unit_specs(units, optimizer.groups.size(), label_);
  params_ = all_parameters(units);
  if (params_.empty()) throw RunError(label_ + ": the model has no parameters");
  broadcast_parameters(comm_, params_);

  // Ready order: units last to first, parameters last to first within a unit.
  std::vector<BucketParam> ready_order;
  for (int i = int(params_.size()); i-- > 0;) {
    const at::Tensor& p = params_[size_t(i)].second;
    ready_order.push_back({i, p.numel(), int(p.element_size()), int(p.scalar_type())});
  }
  buckets_ = plan_buckets(ready_order, int64_t(bucket_cap_mb_ * 1024.0 * 1024.0));

  bucket_of_param_.assign(params_.size(), -1);
  grad_views_.resize(params_.size());
  for (size_t b = 0; b < buckets_.size(); ++b) {
    auto dtype = at::ScalarType(buckets_[b].dtype);
    at::Tensor flat = at::zeros({buckets_[b].numel}, at::TensorOptions(dtype).device(params_[0].second.device()));
    for (const auto& slot : buckets_[b].slots) {
      at::Tensor& p = params_[slot.index].second;
      // autograd accumulates into an existing .grad in place, so the bucket sees every micro-step.
      grad_views_[size_t(slot.index)] = grad_alias(flat, slot.offset, p.sizes());
      p.mutable_grad() = grad_views_[size_t(slot.index)];
      bucket_of_param_[slot.index] = int(b);
    }
    bucket_flats_.push_back(flat);
  }
  std::vector<int> group_of;
  for (const auto& u : units) group_of.insert(group_of.end(), u.groups.begin(), u.groups.end());
  optimizer_ = Optimizer::make(optimizer, params_, group_of);
  std::vector<at::Tensor> tensors;
  for (const auto& [name, p] : params_) tensors.push_back(p);
  grad_hooks_ = std::make_unique<GradReadyHooks>(tensors, nullptr, [this](int i) { on_grad_ready(i); });
}

std::string DdpBackend::describe() const {
  std::ostringstream s;
  int64_t numel = 0;
  for (const auto& b : buckets_) numel += b.numel;
  s << label_ << ": " << params_.size() << " parameter tensors (" << numel << " values) replicated on " << comm_.size()
    << " rank(s); " << buckets_.size() << " gradient bucket(s) of at most " << bucket_cap_mb_
    << " MiB, all-reduced during the backward of each step's last micro-step";
  if (!notes_.empty()) s << "; " << notes_;
  if (optimizer_->setup().fused && optimizer_->kind() == config::OptimizerName::adamw) s << "; fused AdamW";
  if (const at::Device d = params_[0].second.device(); !d.is_cpu()) s << "; on " << d.str();
  return s.str();
}

UnitHooks* DdpBackend::begin_micro_step(int /*micro_step*/, bool sync) {
  syncing_ = sync && comm_.size() > 1;
  if (!syncing_) return nullptr;
  ready_.assign(params_.size(), 0);
  pending_.clear();
  for (const auto& b : buckets_) pending_.push_back(int(b.slots.size()));
  // A parameter that takes no gradient never becomes ready: its bucket waits for end_micro_step.
  next_bucket_ = 0;
  works_.clear();
  return nullptr;  // readiness comes from the parameters' AccumulateGrad hooks
}

void DdpBackend::on_grad_ready(int i) {
  if (!syncing_) return;
  if (ready_[size_t(i)]) {
    // Autograd added to this gradient again in the same micro-step (a second backward pass): too
    // late if its bucket's all-reduce is already on its way.
    if (size_t(bucket_of_param_[size_t(i)]) < next_bucket_)
      throw RunError(label_ + ": parameter '" + params_[size_t(i)].first + "' received a second gradient in one "
                     "micro-step after its bucket was all-reduced; run one backward pass per micro-step");
    return;
  }
  mark_param_ready(i);
  launch_ready_buckets();
}

void DdpBackend::mark_param_ready(int i) {
  ready_[size_t(i)] = 1;
  --pending_[size_t(bucket_of_param_[size_t(i)])];
}

void DdpBackend::launch_ready_buckets() {
  // Strictly in bucket order, so every rank issues the same sequence of collectives.
  while (next_bucket_ < buckets_.size() && pending_[next_bucket_] == 0) {
    works_.push_back(comm_.all_reduce(bucket_flats_[next_bucket_], comm::ReduceOp::Avg));
    ++next_bucket_;
  }
}

void DdpBackend::end_micro_step(bool sync) {
  if (!sync || comm_.size() == 1) return;
  // Parameters that took no gradient in this backward (unused ones) are ready now, as zeros.
  for (size_t i = 0; i < params_.size(); ++i)
    if (!ready_[i]) mark_param_ready(int(i));
  launch_ready_buckets();
  if (next_bucket_ != buckets_.size()) throw RunError("ddp: a gradient bucket was not reduced (internal error)");
  for (auto& w : works_) w->wait();
  works_.clear();
  syncing_ = false;
}

void DdpBackend::rearm_grads() {
  rearm_grad_aliases(params_, grad_views_);
}

double DdpBackend::unscale_and_clip(double max_norm, double grad_scale) {
  // Gradients are replicated after the all-reduce: the local norm is the global one.
  // The buckets' values, whatever a user's zero_grad() did to .grad meanwhile.
  rearm_grads();
  std::vector<at::Tensor> grads;
  for (auto& [name, p] : params_) grads.push_back(p.grad());
  return unscale_and_clip_grad_norm(grads, grad_scale, max_norm);
}

void DdpBackend::optimizer_step(const std::vector<GroupHyper>& groups) {
  rearm_grads();  // the optimizer reads .grad: the buckets' values
  optimizer_->step(groups);
  for (auto& flat : bucket_flats_) flat.zero_();
}

void DdpBackend::skip_step() {
  for (auto& flat : bucket_flats_) flat.zero_();
}

nlohmann::json DdpBackend::memory_report() const {
  int64_t params = 0, grads = 0, states = 0;
  for (const auto& [name, p] : params_) params += int64_t(p.numel()) * int64_t(p.element_size());
  for (const auto& flat : bucket_flats_) grads += int64_t(flat.numel()) * int64_t(flat.element_size());
  for (const auto& [name, t] : optimizer_->state_tensors())
    if (t.dim() > 0) states += int64_t(t.numel()) * int64_t(t.element_size());  // step counters are scalars
  return {{"params", params}, {"grads", grads}, {"grad_shard", 0}, {"master", 0}, {"optimizer_states", states},
          {"live_params_peak", 0}, {"live_grads_peak", 0}};
}

void DdpBackend::check_replicas_agree() {
  // Replicas must be bit-identical; a cheap fp64 fingerprint compared across ranks proves it
  // wherever weights leave the job.
  double fingerprint = 0;
  for (auto& [name, p] : params_) fingerprint += p.detach().to(at::kDouble).abs().sum().item<double>();
  const std::vector<double> extremes = comm::all_reduce_values(comm_, {fingerprint, -fingerprint}, comm::ReduceOp::Max);
  if (extremes[0] != -extremes[1])
    throw RunError("ddp: the parameter replicas differ between ranks (fingerprints in [" +
                   std::to_string(-extremes[1]) + ", " + std::to_string(extremes[0]) +
                   "]); this is a bug, please report it with `accel env`");
}

NamedTensors DdpBackend::full_parameters() {
  check_replicas_agree();
  NamedTensors out;  // on every rank: the checkpoint's writer may be any rank (node-local storage)
  for (auto& [name, p] : params_) out.emplace_back(name, p.detach().to(at::kCPU));
  return out;
}

void DdpBackend::visit_full_parameters(const std::function<void(const NamedTensors&)>& visit) {
  check_replicas_agree();
  // Every rank holds the replica; rank 0 hands out one host copy at a time.
  if (comm_.rank() != 0) return;
  for (auto& [name, p] : params_) visit({{name, p.detach().to(at::kCPU)}});
}

nlohmann::json DdpBackend::save_state(TensorFileSink& files, const CheckpointStorage& storage) {
  // Replicated state: the first rank on each storage writes the copy (full_parameters is
  // collective: every rank calls it).
  NamedTensors params = full_parameters();
  std::vector<int> everyone(size_t(comm_.size()));
  for (int r = 0; r < comm_.size(); ++r) everyone[size_t(r)] = r;
  if (storage.writes(comm_.rank(), everyone)) {
    files.write(kModelFile, params);
    files.write(kOptimizerFile, optimizer_->state_tensors());
  }
  return {{"layout", "replicated"}, {"files", {kModelFile, kOptimizerFile}}};
}

void DdpBackend::load_state(const std::string& dir, const nlohmann::json& layout) {
  if (layout.value("layout", "") != "replicated") {
    // A sharded checkpoint (any world size): read in canonical form, one parameter at a time (0006).
    restore_replicated(*CanonicalState::open(dir, layout), params_, *optimizer_, label_);
    return;
  }
  NamedTensors saved = load_safetensors(dir + "/" + kModelFile);
  if (saved.size() != params_.size())
    throw RunError(dir + "/" + kModelFile + ": " + std::to_string(saved.size()) + " tensors, the model has " +
                   std::to_string(params_.size()));
  {
    at::NoGradGuard no_grad;
    for (size_t i = 0; i < params_.size(); ++i) {
      const auto& [name, p] = params_[i];
      if (saved[i].first != name || !saved[i].second.sizes().equals(p.sizes()))
        throw RunError(dir + "/" + kModelFile + ": tensor " + std::to_string(i) + " is '" + saved[i].first +
                       "', expected '" + name + "' with the model's shape");
      p.copy_(saved[i].second);
    }
  }
  optimizer_->load_state(load_safetensors(dir + "/" + kOptimizerFile));
}

}  // namespace accel::engine
