// A built-in model prepared as the built-in trainer prepares it (see prepared_builtin.hpp).
#include "tests/support/prepared_builtin.hpp"

#include "api/prepared_units.hpp"
#include "api/unit_sink.hpp"
#include "engine/optim/param_groups.hpp"
#include "runtime/common/errors.hpp"
#include "runtime/config/plan/resolve_plan.hpp"
#include "trainer/models/builtin_ops.hpp"

namespace accel::test {

std::shared_ptr<train::BuiltinModule> builtin_module(const config::ModelSection& section, uint64_t seed) {
  auto module = train::make_builtin_module(section);
  module->initialize(seed);
  return module;
}

PreparedBuiltin::PreparedBuiltin(const config::JobConfig& job, comm::Communicator& comm,
                                 std::shared_ptr<train::BuiltinModule> module)
    : module_(std::move(module)) {
  prepare(job, [&](std::vector<engine::UnitSpec> specs) {
    return engine::make_backend(job, comm, std::move(specs), engine::builtin_optimizer_setup(job.optimizer));
  });
}

PreparedBuiltin::PreparedBuiltin(const config::JobConfig& job, std::shared_ptr<train::BuiltinModule> module,
                                 const EngineFactory& make_engine)
    : module_(std::move(module)) {
  prepare(job, make_engine);
}

PreparedBuiltin::~PreparedBuiltin() {
  if (sink_) sink_->detach();
}

void PreparedBuiltin::prepare(const config::JobConfig& job, const EngineFactory& make_engine) {
  // The built-in model's plan, refused as the launcher refuses it (a layer class other than the
  // model's), with the unit boundaries its wrappers give.
  const plan::ResolvedPlan resolved = plan::resolve_plan(job, plan::ModelFacts::builtin());
  if (!resolved.refusals.empty())
    throw RunError("backend " + resolved.dialect + ": " + plan::describe(resolved.refusals.front()));
  config::LoadedJob loaded;  // no key set explicitly: the defaults' rules apply
  loaded.job = job;
  std::unordered_map<const void*, int> group_of;
  for (const auto& [name, p] : module_->spec_parameters())
    group_of[p.unsafeGetTensorImpl()] = engine::builtin_param_group(p.dim());
  const at::Device device = module_->spec_parameters().front().second.device();
  api::PreparedUnits prepared =
      api::prepared_units(*module_, api::job_unit_policy(loaded, resolved, *module_), group_of, device);
  for (const auto& spec : prepared.specs) {
    int64_t numel = 0;
    for (const auto& [name, p] : spec.params) numel += p.numel();
    units_.push_back({spec.name, numel, spec.pinned});
  }
  for (const auto& [name, wrapper] : prepared.boundaries) names_[wrapper] = name;
  engine_ = make_engine(std::move(prepared.specs));
  recompute_ = resolved.activation_checkpointing;
  // The sink is attached whatever the strategy, so the hooks a test passes always reach the
  // boundaries (the Accelerator attaches it only where the engine needs them).
  sink_ = api::attach_unit_sink(prepared.boundaries, [this] { return hooks_; }, engine_->name(), recompute_);
  sink_->refuse_second_use(recompute_ && !resolved.frees_parameters());
}

at::Tensor PreparedBuiltin::forward(const at::Tensor& idx, engine::UnitHooks* hooks) {
  engine_->wait_parameters();
  sink_->begin_micro_step();  // one forward per micro-step, as the trainer runs them
  hooks_ = hooks;
  struct Reset {
    engine::UnitHooks*& hooks;
    ~Reset() { hooks = nullptr; }
  } reset{hooks_};
  return module_->forward(idx);
}

at::Tensor PreparedBuiltin::loss(const at::Tensor& logits, const at::Tensor& targets) {
  return train::token_cross_entropy(logits, targets);
}

}  // namespace accel::test
