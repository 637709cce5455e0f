// accel::ShardedInit (include/accel/sharded_init.hpp; docs/design/0023 decision 3): the scope that
// makes each accel::Unit<> built on its thread keep only this rank's slice, and the placing of a
// host-resident model on a GPU rank's device at prepare().
#include "accel/sharded_init.hpp"

#include "api/accelerator_state.hpp"
#include "api/construction_stash.hpp"
#include "engine/placeholder.hpp"
#include "runtime/config/plan/resolve_plan.hpp"

namespace accel {
namespace {

thread_local api::ConstructionStash* open_stash = nullptr;  // this thread's accel::ShardedInit scope

// The plan's partitioning as the scope needs it: how a unit is cut and which piece is this rank's
// (the engine's shard group: every rank, or one machine's under HYBRID_SHARD).
api::StashLayout stash_layout(const config::JobConfig& job, const comm::Communicator& comm) {
  const plan::ResolvedPlan resolved = plan::resolve_plan(job, plan::ModelFacts::user(true));
  api::StashLayout layout;
  layout.partitions = resolved.frees_parameters() && resolved.refusals.empty();
  const int g = resolved.shard_group_size;
  const bool groups = g > 0 && g < comm.size();
  layout.shards = groups ? g : comm.size();
  layout.shard_rank = groups ? comm.rank() % g : comm.rank();
  layout.persistence_threshold = resolved.persistence_threshold;
  return layout;
}

}  // namespace

ShardedInit::ShardedInit(Accelerator& acc) {
  Accelerator::State& s = *acc.state_;
  if (s.backend)
    throw RunError("accel::ShardedInit: the model was prepared already; construct the model inside the scope, "
                   "then call prepare()");
  if (open_stash) throw RunError("accel::ShardedInit: a scope is open on this thread already (scopes do not nest)");
  if (!s.stash) s.stash = std::make_shared<api::ConstructionStash>(*s.comm, stash_layout(s.job.job, *s.comm));
  open_stash = s.stash.get();
}

ShardedInit::~ShardedInit() { open_stash = nullptr; }

void detail::unit_constructed(torch::nn::Module& unit) {
  if (open_stash) open_stash->take(unit);
}

namespace api {

// A model left on the host of a GPU job (accel::ShardedInit): what is whole goes to the device one
// tensor at a time; a placeholder gets device storage of one element, never its full shape (which
// model->to() would allocate).
void place_on_device(torch::nn::Module& model, const at::Device& device) {
  at::NoGradGuard no_grad;
  for (auto& p : model.parameters(/*recurse=*/true)) {
    if (p.device() == device) continue;
    p.set_data(engine::is_placeholder(p) ? engine::make_placeholder(p.sizes(), p.options().device(device))
                                           : p.to(device));
  }
  for (auto& b : model.buffers(/*recurse=*/true))
    if (b.defined() && b.device() != device) b.set_data(b.to(device));
}

}  // namespace api
}  // namespace accel
