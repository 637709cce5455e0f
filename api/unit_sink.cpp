#include "api/unit_sink.hpp"

#include <ATen/core/grad_mode.h>

#include "engine/activation_checkpoint.hpp"
#include "runtime/common/errors.hpp"

namespace accel::detail {

std::string UnitSink::path_of(const torch::nn::Module& unit) const {
  auto it = paths_.find(&unit);
  return it == paths_.end() ? unit.name() : it->second;
}

void UnitSink::count_use(const torch::nn::Module& unit) {
  if (++uses_[&unit] < 2) return;
  throw RunError("accel::Unit<> '" + path_of(unit) + "': called twice in one micro-step under " + strategy_ +
                 " with activation_checkpointing; this strategy finds a unit's gradients ready per backward pass, and "
                 "each recompute is a pass of its own, so the first recompute would reduce them early; fix: "
                 "sharding_strategy FULL_SHARD or HYBRID_SHARD (which count a unit's uses at its boundaries), or call "
                 "each wrapper once per forward, or remove fsdp.activation_checkpointing");
}

at::Tensor unit_pre_forward(UnitTag& tag, torch::nn::Module& unit, at::Tensor x, bool other_inputs_need_grad) {
  UnitSink* sink = UnitAccess::sink(tag);
  engine::UnitHooks* hooks = sink ? sink->hooks() : nullptr;
  const bool recompute = sink && sink->recomputes();
  if (!hooks && !recompute) return x;
  // The unit's parameters are released once the first argument's gradient is complete, and a
  // recompute passes a gradient to the first argument only: a second input that takes gradients
  // would read released parameters, or lose its gradient.
  if (other_inputs_need_grad)
    throw RunError("accel::Unit<> '" + sink->path_of(unit) + "': a tensor argument after the first requires grad; under " +
                   sink->strategy() + (recompute ? " with activation_checkpointing" : "") +
                   " only the first may (its gradient ends the unit's backward); fix: pass the gradient-carrying input "
                   "first, or wrap a module that takes one such input");
  if (sink->refuses_second_use() && at::GradMode::is_enabled()) sink->count_use(unit);
  return hooks ? hooks->pre_forward(unit, std::move(x)) : x;
}

at::Tensor unit_post_forward(UnitTag& tag, torch::nn::Module& unit, at::Tensor y) {
  UnitSink* sink = UnitAccess::sink(tag);
  engine::UnitHooks* hooks = sink ? sink->hooks() : nullptr;
  return hooks ? hooks->post_forward(unit, std::move(y)) : y;
}

bool unit_recomputes(UnitTag& tag) {
  UnitSink* sink = UnitAccess::sink(tag);
  return sink && sink->recomputes();
}

at::Tensor unit_recompute(std::function<at::Tensor(const at::Tensor&)> body, const at::Tensor& x) {
  return engine::recompute_in_backward(std::move(body), x);
}

void unit_output_unsupported(torch::nn::Module& unit) {
  UnitSink* sink = dynamic_cast<UnitTag*>(&unit) ? UnitAccess::sink(*dynamic_cast<UnitTag*>(&unit)) : nullptr;
  const std::string where = sink ? sink->path_of(unit) : unit.name();
  throw RunError("accel::Unit<> '" + where + "': its forward takes no tensor argument or returns something other than "
                 "a tensor or a std::tuple; under " + (sink ? sink->strategy() : std::string("this strategy")) +
                 " a unit's boundary needs a tensor in and tensors out; fix: wrap a module whose forward does");
}

}  // namespace accel::detail

namespace accel::api {

detail::UnitTag* unit_tag(torch::nn::Module& module) { return dynamic_cast<detail::UnitTag*>(&module); }

bool has_unit_wrappers(torch::nn::Module& root) {
  if (unit_tag(root)) return true;
  for (const auto& m : root.modules(/*include_self=*/false))
    if (unit_tag(*m)) return true;
  return false;
}

std::shared_ptr<detail::UnitSink> attach_unit_sink(const std::vector<std::pair<std::string, torch::nn::Module*>>& units,
                                                   std::function<engine::UnitHooks*()> hooks, std::string strategy,
                                                   bool recompute) {
  auto sink = std::make_shared<detail::UnitSink>(std::move(hooks), std::move(strategy), recompute);
  for (const auto& [path, module] : units) {
    detail::UnitTag* tag = module ? unit_tag(*module) : nullptr;
    if (!tag) continue;
    sink->paths()[module] = path;
    detail::UnitAccess::attach(*tag, sink);
  }
  return sink;
}

}  // namespace accel::api
