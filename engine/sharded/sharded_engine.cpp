#include "engine/sharded/sharded_engine.hpp"

#include <ATen/core/grad_mode.h>

#include <algorithm>

#include "engine/format/checkpoint_reshard.hpp"
#include "engine/format/safetensors.hpp"
#include "engine/model_replicas.hpp"
#include "engine/optim/grad_clip.hpp"
#include "engine/optim/optimizer.hpp"
#include "engine/sharded/phase_memory.hpp"
#include "engine/sharded/unit_block_allocator.hpp"
#include "engine/sharded/unit_grouping.hpp"
#include "runtime/common/errors.hpp"

namespace accel::engine {
namespace {

// Tags of backward signals: which unit, and whether it fires before (gather) or after its backward.
int64_t tag_of(int u, bool pre_backward) { return int64_t(u) * 2 + (pre_backward ? 1 : 0); }

// Every model unit in exactly one group, members ascending, model unit 0 (the pinned root of a
// prepared module) in group 0: what the hooks below rely on.
void check_grouping(const UnitGroups& groups, int units, const std::string& who) {
  std::vector<int> seen(size_t(units), 0);
  bool ok = !groups.empty() && !groups[0].empty() && groups[0][0] == 0;
  for (const auto& g : groups) {
    ok = ok && !g.empty();
    for (size_t i = 0; ok && i < g.size(); ++i) {
      ok = g[i] >= 0 && g[i] < units && (i == 0 || g[i] > g[i - 1]);
      if (ok) ++seen[size_t(g[i])];
    }
  }
  for (int c : seen) ok = ok && c == 1;
  if (!ok) throw RunError(who + ": the unit grouping does not cover each of the model's " + std::to_string(units) +
                          " units exactly once with the embedding first");
}

}  // namespace

void ShardedEngine::fill_from_source(UnitSource& source, const std::vector<int>& unit_params, const FlatLayout& layout,
                                     bool keeps, at::Tensor& flat) {
  // A unit released after building needs only this rank's shard; a kept one, every value.
  auto write = [&](int k, int64_t param_begin, int64_t flat_begin, int64_t count) {
    if (count == 0) return;
    const auto& [name, param] = params_[size_t(unit_params[size_t(k)])];
    source.fill(name, param, param_begin, flat.narrow(0, flat_begin, count));
  };
  if (keeps) {
    for (int k = 0; k < layout.num_params(); ++k) write(k, 0, layout.param_offset(k), layout.param_numel(k));
    return;
  }
  const int64_t shard_begin = int64_t(shard_rank()) * layout.shard_numel();
  for (const ShardSegment& seg : layout.segments(shard_rank()))
    write(seg.param, seg.param_offset, shard_begin + seg.shard_offset, seg.numel);
}

ShardedEngine::ShardedEngine(comm::Communicator& comm, std::vector<UnitSpec> specs,
                             const OptimizerSetup& optimizer, ShardingPolicy policy,
                             std::shared_ptr<UnitSource> source)
    : comm_(comm), policy_(std::move(policy)) {
  check_unit_specs(specs, optimizer.groups.size(), policy_.label);
  params_ = all_parameters(specs);
  if (policy_.shard_params) policy_.shard_grads = true;
  if (policy_.shard_params)
    for (const auto& spec : specs)
      if (!spec.module && !spec.pinned)
        throw RunError(policy_.label + ": partitioned parameters are freed between uses, which needs unit boundaries "
                       "in the model's forward; unit '" + spec.name + "' has none");
  if (!policy_.shard_optimizer && policy_.shard_grads)
    throw RunError(policy_.label + ": sharded gradients need sharded optimizer states");
  if (params_.empty()) throw RunError(policy_.label + ": the model has no parameters");
  device_ = params_[0].second.device();
  for (const auto& [name, p] : params_)
    if (p.device() != device_ || p.device() != comm_.device())
      throw RunError(policy_.label + ": parameter '" + name + "' is on " + p.device().str() + ", but the job's ranks "
                     "compute on " + comm_.device().str() + " (move the model there before preparing it)");
  // From a source every rank computes its own values (and the parameters may be placeholders).
  if (!source) broadcast_parameters(comm_, params_);
  if (const int g = policy_.shard_group_size; g > 0 && g < comm_.size()) {
    if (!policy_.shard_optimizer || comm_.size() % g != 0)
      throw RunError(policy_.label + ": shard groups of " + std::to_string(g) + " ranks need sharded states and a "
                     "world size (" + std::to_string(comm_.size()) + ") they divide");
    // Every rank makes both splits in the same order (they are collectives over the world).
    shard_group_ = comm_.split(comm_.rank() / g);
    replica_group_ = comm_.split(comm_.rank() % g);
  }
  const int shards = policy_.shard_optimizer ? shard_comm().size() : 1;
  at::NoGradGuard no_grad;
  if (policy_.master_dtype != at::kFloat && policy_.master_dtype != at::kBFloat16)
    throw RunError(policy_.label + ": masters are fp32 or bf16");
  if (!policy_.nvme_dir.empty() && policy_.master_dtype != at::kFloat)
    throw RunError(policy_.label + ": nvme offload keeps fp32 masters only");
  optimizer_ = std::make_unique<ShardedOptimizer>(optimizer, shard_rank(), policy_.master_dtype);
  // Offload on a GPU: masters, gradient shards and optimizer states in host memory, stepped there.
  optimizer_->place_states(policy_.offloads ? at::Device(at::kCPU) : device_, device_);
  if (policy_.offloads && !device_.is_cpu()) grad_landing_ = std::make_unique<HostGradLanding>(device_);
  buffers_ = std::make_unique<UnitParamBuffers>(shard_comm(), policy_.prefetch);
  // Offloaded states go to their files unit by unit as the units are added (never all in memory).
  if (!policy_.nvme_dir.empty()) optimizer_->offload_to_nvme(policy_.nvme_dir, policy_.nvme_buffer_count);
  const at::ScalarType compute = policy_.compute_dtype;
  if (!policy_.param_nvme_dir.empty()) {
    if (!policy_.shard_params)
      throw RunError(policy_.label + ": parameter offload to nvme needs partitioned parameters (ZeRO stage 3)");
    param_store_ = std::make_unique<NvmeParamStore>(policy_.param_nvme_dir, comm_.rank(), policy_.nvme_buffer_count,
                                                    compute, device_);
    buffers_->set_shard_source(param_store_.get());
  } else if (policy_.param_host_offload && policy_.shard_params) {
    host_params_ = std::make_unique<HostParamStore>(compute, device_);
    buffers_->set_shard_source(host_params_.get());
  }
  // fp32 compute with the masters in files: a gather reads the master's part of the optimizer's file.
  const bool params_from_masters = param_store_ && optimizer_->offloaded() && compute == at::kFloat &&
                                   policy_.master_dtype == at::kFloat;
  std::vector<std::vector<int>> unit_params;
  std::vector<int> group_of;
  for (const auto& spec : specs) {
    unit_params.emplace_back();
    for (size_t k = 0; k < spec.params.size(); ++k) unit_params.back().push_back(int(group_of.size() + k));
    group_of.insert(group_of.end(), spec.groups.begin(), spec.groups.end());
  }
  const UnitGroups groups = policy_.unit_groups.empty() ? one_group_per_unit(int(specs.size())) : policy_.unit_groups;
  check_grouping(groups, int(specs.size()), policy_.label);
  unit_of_param_.assign(params_.size(), -1);
  grad_views_.resize(params_.size());
  for (const auto& group : groups) {
    UnitRuntime rt;
    std::vector<std::string> names;
    for (int m : group) {
      const UnitSpec& spec = specs[size_t(m)];
      rt.members.push_back(spec.module);
      if (spec.pinned) {
        rt.token_input = true;
        rt.token_unit = spec.module;
      }
      names.push_back(spec.name);
      rt.params.insert(rt.params.end(), unit_params[size_t(m)].begin(), unit_params[size_t(m)].end());
    }
    rt.name = group_name(names);
    std::vector<int64_t> numels;
    std::vector<int> param_groups;
    for (int index : rt.params) {
      numels.push_back(params_[size_t(index)].second.numel());
      param_groups.push_back(group_of[size_t(index)]);
      unit_of_param_[size_t(index)] = int(units_.size());
      if (params_[size_t(index)].second.requires_grad()) ++rt.needed;
    }
    FlatLayout layout(numels, shards);
    bool keeps = !policy_.shard_params || layout.numel() < policy_.persistence_threshold || (rt.token_input && !rt.token_unit);
    // The masters start from the model's values: fp32 whatever the load dtype (DeepSpeed; FSDP
    // mixed), or the load dtype itself (FSDP precision_mode low).
    at::Tensor flat = unit_zeros(layout.padded_numel(), at::kFloat, device_);
    if (!source) {
      for (size_t k = 0; k < rt.params.size(); ++k)
        flat.narrow(0, layout.param_offset(int(k)), layout.param_numel(int(k))).copy_(params_[size_t(rt.params[k])].second.reshape(-1));
    } else {
      fill_from_source(*source, rt.params, layout, keeps, flat);
    }
    at::Tensor my_shard = flat.narrow(0, int64_t(shard_rank()) * layout.shard_numel(), layout.shard_numel());
    // A kept fp32 unit's master is its parameters' own shard, stepped in place and all-gathered from
    // there (zero 1-2, SHARD_GRAD_OP, persistent units): a second fp32 copy would hold the same
    // values. Not with offload (the master lives apart) nor in low precision (other dtypes).
    rt.master_in_params = keeps && compute == at::kFloat && policy_.master_dtype == at::kFloat && !policy_.offloads &&
                          policy_.nvme_dir.empty() && !param_store_ && !host_params_;
    UnitShardState& st = optimizer_->add_unit(rt.name, layout, param_groups, my_shard, rt.master_in_params);
    // The parameters' storage from now on (a copy unless fp32).
    at::Tensor full = compute == at::kFloat ? flat : unit_empty(layout.padded_numel(), compute, device_).copy_(flat);
    if (host_params_ && !keeps) {
      // Parameter offload to host memory: a partitioned unit's shard lives there between gathers.
      rt.param_file = host_params_->add_unit(my_shard.to(compute));
    } else if (param_store_ && !keeps) {
      // Parameter offload: a partitioned unit's shard lives in a file (persistent units keep theirs).
      rt.param_file = params_from_masters
                          ? param_store_->add_master_view(*optimizer_->nvme(), int(units_.size()), layout.shard_numel())
                          : param_store_->add_unit(rt.name, my_shard);
    } else if (!optimizer_->offloaded() && compute == st.master.scalar_type() && st.master.device() == device_) {
      rt.compute_shard = st.master;  // the gathers read the master itself
    } else if (keeps && policy_.shard_params) {
      // Stage 3's kept units (the root, persistent ones) never free their gathered buffer, and the
      // all-gather puts this rank's shard at this very slice of it: the shard is that slice (a view
      // of the same dtype), stepped into there, so no second copy. update_compute_shard waits for a
      // gather in flight before writing it. Stages 1-2 keep their copy (docs/estimate-memory.md).
      rt.compute_shard = full.narrow(0, int64_t(shard_rank()) * layout.shard_numel(), layout.shard_numel());
      rt.shard_in_params = true;
    } else {
      // The master lives apart (a file, host memory) or in another dtype: gathers need their own copy.
      rt.compute_shard = unit_empty(layout.shard_numel(), compute, device_).copy_(my_shard);
    }
    for (size_t k = 0; k < rt.params.size(); ++k) {
      at::Tensor& p = params_[size_t(rt.params[k])].second;
      p.set_data(full.narrow(0, layout.param_offset(int(k)), layout.param_numel(int(k))).view(p.sizes()));
    }
    if (!policy_.shard_grads) {
      rt.grad_flat = unit_zeros(layout.padded_numel(), compute, device_);
      for (size_t k = 0; k < rt.params.size(); ++k) {
        at::Tensor& p = params_[size_t(rt.params[k])].second;
        at::Tensor& view = grad_views_[size_t(rt.params[k])];
        view = grad_alias(rt.grad_flat, layout.param_offset(int(k)), p.sizes());
        p.mutable_grad() = view;
      }
    }
    int index = rt.param_file >= 0 ? buffers_->add_staged_unit(rt.name, full, rt.param_file)
                                   : buffers_->add_unit(rt.name, full, rt.compute_shard, keeps);
    // Stage 3: free the gathered copy now, so the model's fp32 values are replaced unit by unit by
    // shards instead of being held whole until every unit is built (the start-up peak).
    if (!keeps) buffers_->release(index);
    trim_malloc_heap();
    for (const torch::nn::Module* member : rt.members)
      if (member) unit_index_[member] = int(units_.size());
    units_.push_back(std::move(rt));
  }
  if (policy_.shard_grads && policy_.layer_buffers.value_or(!device_.is_cpu())) use_layer_buffers();
  buffers_->release_all();
  // After every set_data (a dtype change replaces a parameter's AccumulateGrad node).
  std::vector<at::Tensor> tensors;
  for (const auto& [name, p] : params_) tensors.push_back(p);
  grad_hooks_ = std::make_unique<GradReadyHooks>(
      tensors, [this](int i) { before_grad(i); }, [this](int i) { after_grad(i); });
  end_memory_phase();  // the model's own parameter storage, replaced by the units' buffers
}

ShardedEngine::~ShardedEngine() {
  if (layer_pool_) layer_pool_->retire();
}

void ShardedEngine::use_layer_buffers() {
  // Slots sized for the largest unit but the token-input one (the embedding, YaFSDP keeps it apart);
  // a unit's gathered parameters and its gradient buffer have the same size.
  size_t slot = 0;
  for (size_t u = 0; u < units_.size(); ++u)
    if (!units_[u].token_input)
      slot = std::max(slot, size_t(shard(int(u)).layout.padded_numel()) * c10::elementSize(policy_.compute_dtype));
  if (slot == 0) return;
  // The backing allocator: the unit allocator on the CPU, the device's own (its caching allocator,
  // as a device tensor's storage names it) elsewhere.
  c10::Allocator* backing = device_.is_cpu() ? &UnitBlockAllocator::instance()
                                             : unit_empty(0, at::kByte, device_).storage().unsafeGetStorageImpl()->allocator();
  layer_pool_ = LayerBufferPool::create(device_, slot, backing);
  // Released units regrow through their storage's allocator: the pool's from now on (parameters
  // are views of the unit's buffer, so the first one names its storage).
  for (size_t u = 0; u < units_.size(); ++u)
    if (!units_[u].token_input && !buffers_->keeps_storage(int(u)))
      layer_pool_->adopt(params_[size_t(units_[u].params.front())].second);
}

std::vector<std::pair<std::string, const comm::Communicator*>> ShardedEngine::group_communicators() const {
  if (!shard_group_) return {};
  return {{"shard_group", shard_group_.get()}, {"replica_group", replica_group_.get()}};
}

bool ShardedEngine::start_trace() {
  trace_ = std::make_unique<UnitTrace>(comm_.rank());
  buffers_->set_trace(trace_.get());
  return true;
}

void ShardedEngine::write_trace(const std::string& path) {
  if (trace_) trace_->write_chrome_trace(path);
}

UnitHooks* ShardedEngine::begin_micro_step(int micro_step, bool sync) {
  eval_ = false;
  reducing_ = policy_.shard_grads || sync;
  if (trace_ && micro_step == 0) trace_->next_step();
  for (auto& rt : units_) {
    rt.uses = rt.fired = rt.pre_fired = 0;
    rt.arrived = 0;
    rt.ready = false;
    rt.reduced = false;
  }
  param_arrived_.assign(params_.size(), 0);
  next_reduce_ = 0;
  return this;  // every micro-step: units may have to wait for their gathers
}

UnitHooks* ShardedEngine::eval_hooks() {
  eval_ = true;
  return this;
}

at::Tensor ShardedEngine::pre_forward(torch::nn::Module& unit, at::Tensor x) {
  const torch::nn::Module* module = &unit;
  int u = unit_index_.at(module);
  UnitRuntime& rt = units_[size_t(u)];
  if (module == rt.token_unit) {
    if (rt.token_uses % 2 == 0) {
      // The pinned unit's first use (the embedding): a new forward starts; it is used again (the
      // tied unembed) at the end.
      buffers_->set_pinned(u, true);
      for (auto& other : units_) other.token_uses = 0;
    }
    ++rt.token_uses;
  }
  trace(TraceEvent::forward_begin, u);
  buffers_->wait(u);
  // The tied unembed (the embedding's second use) ends the forward: nothing comes after it. A
  // unit of several members prefetches the next one when its first member starts.
  const bool ends_forward = module == rt.token_unit && rt.token_uses == 2;
  if (policy_.prefetch.forward && !ends_forward && module == rt.members.front()) buffers_->prefetch_from(u, +1);
  if (x.is_floating_point() && x.scalar_type() != policy_.compute_dtype) x = x.to(policy_.compute_dtype);
  // Stages 0-2 learn that a unit's gradients are complete from its parameters' hooks; stage 3 also
  // needs the end of the unit's whole backward, after which it releases the parameters.
  if (eval_ || !reducing_ || !x.requires_grad() || !policy_.shard_params) return x;
  ++rt.uses;
  return signal_after_backward(x, this, tag_of(u, false));
}

at::Tensor ShardedEngine::post_forward(torch::nn::Module& unit, at::Tensor y) {
  const torch::nn::Module* module = &unit;
  int u = unit_index_.at(module);
  UnitRuntime& rt = units_[size_t(u)];
  trace(TraceEvent::forward_end, u);
  // Stages 0-2 keep the parameters gathered; a unit's gradient buffer (stage 2) is set up by its
  // parameters' hooks, right before autograd adds the first gradient into it.
  if (!policy_.shard_params) return y;
  // A unit's storage can go after its last member's forward; the pinned unit's only after the
  // unembed (and in training not before the micro-step ends: backward needs it first).
  const bool done = rt.token_input ? (module == rt.token_unit && rt.token_uses == 2) : module == rt.members.back();
  if (eval_) {
    if (done) buffers_->release(u);
    return y;
  }
  if (policy_.shard_params && !rt.token_input && done) buffers_->release(u);
  return signal_after_backward(y, this, tag_of(u, true));
}

void ShardedEngine::on_backward(int64_t tag) {
  int u = int(tag / 2);
  UnitRuntime& rt = units_[size_t(u)];
  const auto prefetch = policy_.prefetch.backward;
  if (tag % 2 == 1) {  // before a member's backward: the unit's parameters are needed again
    if (++rt.pre_fired > 1) return;  // the unit's first member in backward order did it all
    trace(TraceEvent::backward_begin, u);
    ensure_grad_buffer(u);
    buffers_->wait(u);
    // The next unit in backward order: after the tied unembed (the token-input unit's first
    // backward) it is the last unit; the token-input unit's own later backward prefetches nothing.
    if (prefetch == PrefetchPolicy::Backward::pre) buffers_->prefetch_from(rt.token_input ? buffers_->size() : u, -1);
    return;
  }
  if (++rt.fired < rt.uses || rt.token_input) return;  // the token-input unit finishes after backward()
  trace(TraceEvent::backward_end, u);
  if (policy_.shard_params && prefetch == PrefetchPolicy::Backward::post) buffers_->prefetch_from(u, -1);
  if (policy_.overlap_comm) reduce_unit(u);
  if (policy_.shard_params) buffers_->release(u);
}

void ShardedEngine::before_grad(int i) {
  // Stage 2 (and 3): the unit's flat gradient buffer exists before autograd adds the first gradient,
  // so every gradient of the unit lands in it in place.
  if (policy_.shard_grads && reducing_) ensure_grad_buffer(unit_of_param_[size_t(i)]);
}

void ShardedEngine::after_grad(int i) {
  if (!reducing_ || eval_) return;
  const int u = unit_of_param_[size_t(i)];
  UnitRuntime& rt = units_[size_t(u)];
  if (rt.reduced)
    throw RunError(policy_.label + ": parameter '" + params_[size_t(i)].first + "' received a gradient after its unit " +
                   rt.name + " was reduced in this micro-step (a second backward pass?); run one backward pass per "
                   "micro-step");
  if (param_arrived_[size_t(i)]) return;  // a second pass before the reduction: accumulated in place
  param_arrived_[size_t(i)] = 1;
  if (++rt.arrived < rt.needed) return;
  rt.ready = true;
  // Stage 3 reduces from the unit's post-backward signal (its parameters are released there too).
  if (policy_.shard_params) return;
  trace(TraceEvent::backward_end, u);
  if (policy_.overlap_comm) reduce_ready_units();
}

void ShardedEngine::reduce_ready_units() {
  const int n = int(units_.size());
  while (next_reduce_ < n && units_[size_t(n - 1 - next_reduce_)].ready) reduce_unit(n - 1 - next_reduce_++);
}

void ShardedEngine::reduce_unit(int u) {
  UnitRuntime& rt = units_[size_t(u)];
  if (rt.reduced) return;
  // A unit whose backward never ran in this micro-step (left out of the forward on every rank)
  // reduces a zero buffer; made before the flag is set, since ensure_grad_buffer skips reduced units.
  ensure_grad_buffer(u);
  rt.reduced = true;
  UnitShardState& st = shard(u);
  const at::ScalarType compute = policy_.compute_dtype;
  PendingReduce pr{u, {}, {}, false, {}};
  if (!policy_.shard_optimizer) {
    pr.input = rt.grad_flat;  // replicated: all-reduced in place, then taken into the fp32 gradient
    pr.accumulate = true;
    trace(TraceEvent::reduce_issued, u);
    pr.work = comm_.all_reduce(pr.input, comm::ReduceOp::Avg);
    pending_.push_back(std::move(pr));
    return;
  }
  if (!policy_.shard_grads) {
    pr.input = rt.grad_flat;  // accumulated over the micro-steps in place
    pr.accumulate = optimizer_->grads_on_nvme() || compute != st.grad.scalar_type() || st.grad.device() != device_;
    pr.output = pr.accumulate ? unit_empty(st.layout.shard_numel(), compute, device_) : st.grad;
  } else {
    pr.input = std::move(rt.grad_buffer);
    rt.grad_buffer = at::Tensor();
    for (int index : rt.params) params_[size_t(index)].second.mutable_grad() = at::Tensor();
    pr.output = unit_empty(st.layout.shard_numel(), compute, device_);
    pr.accumulate = true;
  }
  trace(TraceEvent::reduce_issued, u);
  // Stages 2-3 free the gradient buffer after its reduction: the ring may reduce in it.
  pr.work = policy_.shard_grads ? shard_comm().reduce_scatter_consuming(pr.input, pr.output, comm::ReduceOp::Avg)
                                : shard_comm().reduce_scatter(pr.input, pr.output, comm::ReduceOp::Avg);
  pending_.push_back(std::move(pr));
}

void ShardedEngine::ensure_grad_buffer(int u) {
  UnitRuntime& rt = units_[size_t(u)];
  if (!policy_.shard_grads || rt.grad_buffer.defined() || rt.reduced) return;
  const FlatLayout& layout = shard(u).layout;
  // Bound the full gradients held at once, in flight or still accumulating (stage 2's saving).
  while (!pending_.empty() && pending_numel_ + layout.padded_numel() > policy_.reduce_bucket_numel)
    finish_oldest_reduction();
  pending_numel_ += layout.padded_numel();
  peak_grad_buffer_bytes_ = std::max(peak_grad_buffer_bytes_, pending_numel_ * int64_t(c10::elementSize(policy_.compute_dtype)));
  // Autograd accumulates into defined gradients in place: the unit's gradients land in one flat
  // buffer that is reduce-scattered as it is, with no copy.
  rt.grad_buffer = layer_pool_ ? layer_pool_->empty(layout.padded_numel(), policy_.compute_dtype).zero_()
                               : unit_zeros(layout.padded_numel(), policy_.compute_dtype, device_);  // the last unit's pages, reused
  for (size_t k = 0; k < rt.params.size(); ++k) {
    at::Tensor& p = params_[size_t(rt.params[k])].second;
    p.mutable_grad() = grad_alias(rt.grad_buffer, layout.param_offset(int(k)), p.sizes());
  }
}

void ShardedEngine::finish_oldest_reduction() {
  PendingReduce& pr = pending_.front();
  pr.work->wait();
  // HYBRID_SHARD: the machine's average of this shard, averaged over the machines holding the same
  // shard, is the world average (equal rank counts per machine).
  if (replica_group_ && policy_.shard_optimizer)
    replica_group_->all_reduce(pr.output.defined() ? pr.output : pr.input, comm::ReduceOp::Avg)->wait();
  trace(TraceEvent::reduce_done, pr.unit);
  if (pr.accumulate) {  // fp32 accumulation of the shard (in host memory with offload on a GPU, or on NVMe)
    const at::Tensor& reduced = pr.output.defined() ? pr.output : pr.input;
    const int unit = pr.unit;
    if (reduced.device() == optimizer_->grad_device(unit))
      optimizer_->add_to_grad(unit, reduced);
    else  // copied now, added when the host needs it
      grad_landing_->land(unit, reduced, [this, unit](const at::Tensor& values) { optimizer_->add_to_grad(unit, values); });
  }
  if (policy_.shard_grads) pending_numel_ -= pr.input.numel();
  pending_.pop_front();
}

void ShardedEngine::wait_reductions() {
  while (!pending_.empty()) finish_oldest_reduction();
}

void ShardedEngine::end_micro_step(bool /*sync*/) {
  if (reducing_) {
    // What did not reduce during backward (the token-input unit; everything without overlap_comm),
    // in reverse unit order, the same on every rank.
    for (size_t u = units_.size(); u-- > 0;) reduce_unit(int(u));
    wait_reductions();
  }
  if (policy_.shard_params) buffers_->release_all();
  end_memory_phase(trims_heap_each_step());  // gradient buffers, gathers (and autograd's temporaries)
}

void ShardedEngine::settle_host_transfers() {
  if (grad_landing_) grad_landing_->settle();
}

double ShardedEngine::unscale_and_clip(double max_norm, double grad_scale) {
  settle_host_transfers();
  return optimizer_->unscale_and_clip(grad_scale, max_norm, [this](double local) {
    if (!policy_.shard_optimizer) return local;  // every rank holds the whole (identical) gradient
    return comm::all_reduce_value(shard_comm(), local, comm::ReduceOp::Sum);  // one copy's shards: the whole gradient
  });
}

void ShardedEngine::masters_changed(bool copy_shards) {
  at::NoGradGuard no_grad;
  if (copy_shards) {
    optimizer_->spill();  // offloaded states that a reshard brought into memory go back to their files
    optimizer_->visit_masters([this](int u, const at::Tensor& master) { update_compute_shard(u, master); });
  }
  buffers_->invalidate_all();
  // Replicated (and persistent) units are gathered now, overlapping whatever comes before their use.
  for (int u = 0; u < buffers_->size(); ++u)
    if (buffers_->keeps_storage(u)) buffers_->issue(u);
}

void ShardedEngine::update_compute_shard(int u, const at::Tensor& master) {
  UnitRuntime& rt = units_[size_t(u)];
  // No gather may still read the shard this overwrites (nor, for a shard inside the gathered
  // buffer, write its old values over the new ones when it completes).
  if (rt.param_file < 0) buffers_->finish(u);
  if (rt.param_file >= 0 && host_params_) {
    host_params_->write(rt.param_file, master);
    return;
  }
  if (rt.param_file >= 0) {
    // The write-back: the file is what the next gather reads. A shard read from the master's own
    // file needs none (the optimizer writes that file).
    if (param_store_->has_own_file(rt.param_file)) param_store_->write(rt.param_file, master);
    return;
  }
  // From pinned host masters (offload on a GPU) asynchronously: settle_host_transfers() waits for
  // it before the host writes the masters again.
  if (!rt.compute_shard.is_same(master)) rt.compute_shard.copy_(master, /*non_blocking=*/true);
}

void ShardedEngine::wait_parameters() {
  for (int u = 0; u < buffers_->size(); ++u)
    if (buffers_->keeps_storage(u)) buffers_->wait(u);
}

void ShardedEngine::rearm_grads() {
  if (policy_.shard_grads) return;  // stages 2-3: .grad is set at each unit's first gradient
  rearm_grad_aliases(params_, grad_views_);
}

void ShardedEngine::optimizer_step(const std::vector<GroupHyper>& groups) {
  settle_host_transfers();  // the gradients in host memory, the last uploads of the masters done
  optimizer_->step(groups, [this](int u, UnitShardState& st) { update_compute_shard(u, st.master); });
  optimizer_->zero_grads();
  for (auto& rt : units_)
    if (rt.grad_flat.defined()) rt.grad_flat.zero_();
  if (trace_) trace_->record(TraceEvent::optimizer_step, "");
  if (layer_pool_) layer_pool_->freeze();  // a whole step has shown how many slots the schedule needs
  end_memory_phase(trims_heap_each_step());  // the nvme staging buffers
  masters_changed(false);
}

void ShardedEngine::skip_step() {
  // The masters did not change, so the gathered (and persistent) parameters stay valid.
  settle_host_transfers();
  optimizer_->zero_grads();
  for (auto& rt : units_)
    if (rt.grad_flat.defined()) rt.grad_flat.zero_();
}

}  // namespace accel::engine
