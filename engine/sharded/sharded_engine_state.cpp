// ShardedEngine's state that leaves the job (docs/design/0006): the full weights gathered from the
// fp32 masters, and checkpoints in which each rank writes only its own shard file, resumable at
// another world size or under another backend through the canonical form.
#include "engine/sharded/sharded_engine.hpp"

#include "engine/format/checkpoint_reshard.hpp"
#include "engine/model_replicas.hpp"
#include "engine/optim/optimizer.hpp"
#include "engine/sharded/phase_memory.hpp"

namespace accel::engine {
namespace {

// Name and shape of the parameters params[indices] (a unit's, in flat order), for checkpoints.
std::vector<ParamRecord> param_records(const NamedTensors& params, const std::vector<int>& indices) {
  std::vector<ParamRecord> out;
  for (int i : indices) out.push_back({params[size_t(i)].first, params[size_t(i)].second.sizes().vec(),
                                       params[size_t(i)].second.numel()});
  return out;
}

}  // namespace

NamedTensors ShardedEngine::full_parameters() {
  NamedTensors out;
  visit_full_parameters([&](const NamedTensors& unit) {
    for (const auto& [name, value] : unit) out.emplace_back(name, value.clone());  // the visit's are views
  });
  return out;
}

std::vector<std::string> ShardedEngine::parameter_order() const {
  std::vector<std::string> names;
  for (const auto& unit : units_)
    for (int i : unit.params) names.push_back(params_[size_t(i)].first);
  return names;
}

void ShardedEngine::visit_full_parameters(const std::function<void(const NamedTensors&)>& visit) {
  // From the fp32 masters (what DeepSpeed's zero_to_fp32 recovers), whatever the compute dtype,
  // one unit at a time; rank 0 hands each unit's tensors to `visit`, then they are freed.
  optimizer_->visit_masters([&](int u, const at::Tensor& master) {
    const FlatLayout& layout = shard(u).layout;
    at::Tensor full = master;
    if (policy_.shard_optimizer) {
      const at::Tensor source = master.to(shard_comm().device());  // offloaded masters are on the host
      full = at::empty({layout.padded_numel()}, source.options());
      shard_comm().all_gather(source, full)->wait();
    }
    if (comm_.rank() != 0) return;
    NamedTensors unit;
    for (size_t k = 0; k < units_[size_t(u)].params.size(); ++k) {
      const auto& [name, p] = params_[size_t(units_[size_t(u)].params[k])];
      at::Tensor value = full.narrow(0, layout.param_offset(int(k)), layout.param_numel(int(k))).view(p.sizes());
      // Views of the gathered buffer on the host (a device's copied): `visit` writes them out before
      // the buffer is freed, so a unit is held once, not twice.
      unit.emplace_back(name, value.is_cpu() ? value : value.to(at::kCPU));
    }
    visit(unit);
  });
  end_memory_phase();
}

// Checkpoints (docs/design/0006): each rank writes its own shard file and nothing else, no
// gather; rank 0's layout record names every parameter's place in the flat buffers, so
// merge-weights and a resume at another world size or under another backend can read them.
std::vector<int> ShardedEngine::shard_holders() const {
  std::vector<int> holders;
  if (!policy_.shard_optimizer) {
    for (int r = 0; r < comm_.size(); ++r) holders.push_back(r);
  } else if (replica_group_) {  // shard groups of g consecutive ranks: the copies are g apart
    const int g = shard_comm().size();
    for (int r = comm_.rank() % g; r < comm_.size(); r += g) holders.push_back(r);
  } else {
    holders.push_back(comm_.rank());
  }
  return holders;
}

nlohmann::json ShardedEngine::save_state(TensorFileSink& files, const CheckpointStorage& storage) {
  // Each shard once per storage: replicated optimizer states (shard_optimizer false) are one
  // shard; under HYBRID_SHARD the other machines hold copies, written only where the first
  // machine's files cannot be read (node-local storage, docs/design/0013).
  if (storage.writes(comm_.rank(), shard_holders()))
    optimizer_->save_state_file(files, zero_shard_file(shard_rank()));
  end_memory_phase();
  std::vector<ZeroUnitRecord> records;
  // The state kinds come from the optimizer's configuration: with nvme offload no unit holds its
  // state tensors between steps, and a layout naming none could not be resharded.
  for (size_t u = 0; u < units_.size(); ++u)
    records.push_back({shard(int(u)).unit, shard(int(u)).layout, param_records(params_, units_[u].params)});
  return zero_layout_json(policy_.label, shard(0).layout.world(), records, optimizer_->state_kinds(),
                          master_dtype_name());
}

void ShardedEngine::load_state(const std::string& dir, const nlohmann::json& layout) {
  settle_host_transfers();  // no upload may still read the masters this overwrites
  // The own-shard fast path needs the same masters' dtype too (an fp32 <-> bf16 switch converts
  // through the canonical form, which reads every value as fp32).
  bool own_shards = layout.value("layout", "") == "zero" && layout.value("world_size", 0) == shard(0).layout.world() &&
                    layout.value("dtype", "F32") == master_dtype_name() && layout.contains("units") &&
                    layout["units"].size() == units_.size();
  for (size_t u = 0; own_shards && u < units_.size(); ++u)
    own_shards = layout["units"][u].value("unit", "") == shard(int(u)).unit &&
                 layout["units"][u].value("numel", int64_t(-1)) == shard(int(u)).layout.numel();
  if (own_shards) {  // same layout: this rank's file is its shard, as written
    optimizer_->load_state_file(dir + "/" + zero_shard_file(shard_rank()));
  } else {  // another world size or backend: reslice from the canonical form (nvme: all in memory once)
    optimizer_->materialize();
    std::vector<std::vector<ParamRecord>> unit_params;
    for (const auto& rt : units_) unit_params.push_back(param_records(params_, rt.params));
    restore_shards(*CanonicalState::open(dir, layout), optimizer_->units(), unit_params, policy_.label);
  }
  masters_changed(true);
  end_memory_phase();
}

}  // namespace accel::engine
