// The rules every dialect shares, and the dialect registry (see resolve_plan.hpp).
#include "runtime/config/plan/resolve_plan.hpp"

#include <memory>

#include "runtime/common/errors.hpp"
#include "runtime/config/dialects/builtin_dialects.hpp"
#include "runtime/config/job_loader.hpp"

namespace accel::plan {
namespace {

std::vector<Dialect>& registry() {
  static std::vector<Dialect> dialects = config::dialects::builtin_dialects();
  return dialects;
}

// Parameters, gradients and their communication are bf16 when mixed precision asks for it or the
// model is loaded in bf16, fp16 under mixed_precision fp16; masters and optimizer states stay fp32
// (DeepSpeed's rule; fsdp precision_mode low is the dialect's exception).
Dtype compute_dtype(const config::JobConfig& job) {
  if (job.mixed_precision == config::MixedPrecision::bf16 || job.model.dtype == config::ParamDtype::bf16)
    return Dtype::bf16;
  if (job.mixed_precision == config::MixedPrecision::fp16) return Dtype::fp16;
  return Dtype::fp32;
}

ResolvedPlan resolve(const config::JobConfig& job, const ModelFacts& model, const config::LoadedJob* loaded) {
  const std::string name = config::to_string(job.backend);
  const Dialect* dialect = find_dialect(name);
  if (!dialect) throw RunError("backend: " + name + " is not implemented");
  ResolvedPlan plan;
  plan.dialect = name;
  plan.compute = compute_dtype(job);
  // fp16 scales the loss: torch GradScaler's defaults (init 2^16, growth interval 2000, no
  // hysteresis or floor) unless the dialect has keys of its own (deepspeed).
  if (job.mixed_precision == config::MixedPrecision::fp16) plan.loss_scaling = LossScaling{0, 16, 2000, 1, 0};
  dialect->resolve(DialectInput{job, model, loaded}, plan);
  // One rule picks the engine: nothing sharded with fp32 compute is plain data parallelism; low
  // precision needs fp32 masters beside the 16-bit parameters, which the sharded engine keeps.
  plan.engine = plan.shards == Shards::none && plan.compute == Dtype::fp32 ? Engine::replicated : Engine::sharded;
  return plan;
}

}  // namespace

bool DialectInput::is_explicit(const std::string& key) const { return loaded && loaded->is_explicit(key); }

ResolvedPlan resolve_plan(const config::JobConfig& job, const ModelFacts& model) { return resolve(job, model, nullptr); }

ResolvedPlan resolve_plan(const config::LoadedJob& loaded, const ModelFacts& model) {
  return resolve(loaded.job, model, &loaded);
}

void register_dialect(Dialect dialect) {
  for (auto& d : registry())
    if (d.name == dialect.name) {
      d = std::move(dialect);
      return;
    }
  registry().push_back(std::move(dialect));
}

const Dialect* find_dialect(const std::string& name) {
  for (const auto& d : registry())
    if (d.name == name) return &d;
  return nullptr;
}

std::vector<std::string> dialect_names() {
  std::vector<std::string> names;
  for (const auto& d : registry()) names.push_back(d.name);
  return names;
}

}  // namespace accel::plan
