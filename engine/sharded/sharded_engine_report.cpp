// The sharding engine's reports: describe() (the one line a run logs about its engine) and
// memory_report() (bytes per kind of model state, the figures `accel launch` and the benchmarks
// print). Kept apart from the schedule in sharded_engine.cpp.
#include <algorithm>
#include <sstream>

#include "engine/sharded/sharded_engine.hpp"

namespace accel::engine {

std::string ShardedEngine::describe() const {
  std::ostringstream s;
  int64_t numel = 0, padded = 0;
  int kept = 0;
  for (auto& u : optimizer_->units()) {
    numel += u.layout.numel();
    padded += u.layout.padded_numel();
  }
  for (int u = 0; u < buffers_->size(); ++u) kept += buffers_->keeps_storage(u) ? 1 : 0;
  const std::string master_name = policy_.master_dtype == at::kFloat ? "fp32" : "bf16";
  s << policy_.label << ": " << units_.size() << " units, " << numel << " values (" << padded - numel
    << " padding) in " << (policy_.shard_optimizer ? shard_comm().size() : 1) << " shards; "
    << (policy_.shard_optimizer ? "sharded: optimizer states + " : "replicated ") << master_name
    << (policy_.shard_optimizer ? " master" : " master and optimizer states")
    << (policy_.shard_grads ? ", gradients" : "") << (policy_.shard_params ? ", parameters" : "")
    << "; compute " << c10::toString(policy_.compute_dtype)
    << "; reductions " << (policy_.overlap_comm ? "overlap backward" : "after backward");
  if (policy_.shard_params && kept > 0) s << "; " << kept << " small units stay gathered";
  if (replica_group_)
    s << "; hybrid: sharded within each machine's " << shard_comm().size() << " ranks, replicated on "
      << replica_group_->size() << " machines (gradient shards all-reduced across machines)";
  if (const NvmeStateStore* nvme = optimizer_->nvme())
    s << "; master + optimizer states in files under " << nvme->directory() << " ("
      << nvme->bytes_on_disk() / 1024 << " KiB with the gradient shards, streamed through " << nvme->buffer_bytes() / 1024 << " KiB of buffers)";
  if (policy_.offloads && device_.is_cpu() && policy_.nvme_dir.empty() && !param_store_)
    s << "; offload to cpu: a no-op on a CPU run (everything is in host memory already)";
  else if (host_params_)
    s << "; parameter shards of " << host_params_->size() << " units in pinned host memory ("
      << host_params_->host_bytes() / 1024 << " KiB), copied to the device for each gather";
  if (param_store_ && param_store_->size() == 0) {
    s << "; parameter offload to nvme: no unit is partitioned (all under the persistence threshold), no files";
  } else if (param_store_) {
    s << "; parameter shards of " << param_store_->size() << " units ";
    if (param_store_->has_own_file(0))
      s << "in files under " << param_store_->directory() << " (" << param_store_->bytes_on_disk() / 1024 << " KiB";
    else
      s << "read from the masters' files (fp32: no second copy";
    s << ", staged through at most " << std::min(param_store_->capacity(), param_store_->size()) << " buffers, "
      << param_store_->buffer_bytes() / 1024 << " KiB)";
    if (!optimizer_->offloaded() && policy_.compute_dtype == policy_.master_dtype)
      s << " (the masters are in memory and are the shards' values: the files save no memory here)";
  }
  if (layer_pool_)
    s << "; layer buffers: gathered parameters and gradient buffers take turns in fixed slots of "
      << layer_pool_->slot_bytes() / 1024 << " KiB";
  if (!policy_.notes.empty()) s << "; " << policy_.notes;
  if (!device_.is_cpu())
    s << "; on " << device_.str() << (policy_.offloads ? " (masters, gradient shards and optimizer states in "
                                                          "pinned host memory, stepped on the CPU; gradient shards "
                                                          "and masters copied asynchronously)" : "");
  if (optimizer_->setup().fused && optimizer_->setup().kind == config::OptimizerName::adamw)
    s << "; fused AdamW";
  return s.str();
}

nlohmann::json ShardedEngine::memory_report() const {
  auto bytes = [](const at::Tensor& t) { return t.defined() ? int64_t(t.numel()) * int64_t(t.element_size()) : int64_t(0); };
  int64_t grads = 0, grad_shard = 0, master = 0, states = 0, compute_shards = 0;
  for (size_t u = 0; u < units_.size(); ++u) {
    const UnitShardState& st = optimizer_->units()[u];
    grads += bytes(units_[u].grad_flat);
    grad_shard += bytes(st.grad);
    if (!units_[u].master_in_params) master += bytes(st.master);
    states += bytes(st.exp_avg) + bytes(st.exp_avg_sq) + bytes(st.momentum);
    // A stage-3 kept unit's shard is a slice of its gathered buffer, counted in "params".
    if (!units_[u].compute_shard.is_same(st.master) && !units_[u].shard_in_params)
      compute_shards += bytes(units_[u].compute_shard);
  }
  nlohmann::json r = {{"params", buffers_->kept_bytes()},
                      // The compute-dtype shards gathers read, held beside the parameters: bf16, or fp32
                      // beside masters that live apart (stages 1-2, stage 3's partitioned units).
                      {"param_shards", compute_shards},
                      {"grads", grads},
                      {"grad_shard", grad_shard},
                      {"master", master},
                      {"optimizer_states", states},
                      {"live_params_peak", buffers_->peak_transient_bytes()},
                      {"live_grads_peak", peak_grad_buffer_bytes_}};
  // nvme: the files (optimizer states, parameter shards) and the host buffers that stage them.
  if (const NvmeStateStore* nvme = optimizer_->nvme()) {
    r["nvme_bytes"] = nvme->bytes_on_disk();
    r["nvme_buffer_bytes"] = nvme->buffer_bytes();
    int64_t grad_bytes = 0;  // the gradient shards' slots of those files
    for (const auto& st : optimizer_->units()) grad_bytes += st.layout.shard_numel() * 4;
    r["grad_shard_nvme_bytes"] = grad_bytes;
  }
  if (host_params_) r["param_host_bytes"] = host_params_->host_bytes();
  if (grad_landing_) r["grad_staging_host_bytes"] = grad_landing_->staging_bytes();
  if (layer_pool_) {
    r["layer_buffer_slots"] = layer_pool_->slots();
    r["layer_buffer_bytes"] = int64_t(layer_pool_->slots()) * int64_t(layer_pool_->slot_bytes());
    r["layer_buffer_fallbacks"] = layer_pool_->fallbacks();
  }
  if (param_store_) {
    r["param_nvme_bytes"] = param_store_->bytes_on_disk();
    r["param_nvme_buffer_bytes"] = param_store_->buffer_bytes();
    r["param_nvme_staged_peak"] = param_store_->peak_staged();  // shards staged at once, at most buffer_count
    r["nvme_bytes"] = r.value("nvme_bytes", int64_t(0)) + param_store_->bytes_on_disk();
    r["nvme_buffer_bytes"] = r.value("nvme_buffer_bytes", int64_t(0)) + param_store_->buffer_bytes();
  }
  return r;
}

}  // namespace accel::engine
