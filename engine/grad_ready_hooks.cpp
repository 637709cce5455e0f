#include "engine/grad_ready_hooks.hpp"

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <ATen/core/grad_mode.h>
#include <c10/util/strides.h>

#include <algorithm>

namespace accel::engine {
namespace {

class BeforeAccumulate final : public torch::autograd::FunctionPreHook {
 public:
  BeforeAccumulate(std::function<void(int)> fn, int index) : fn_(std::move(fn)), index_(index) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& grads) override {
    fn_(index_);
    return grads;
  }

 private:
  std::function<void(int)> fn_;
  int index_;
};

class AfterAccumulate final : public torch::autograd::FunctionPostHook {
 public:
  AfterAccumulate(std::function<void(int)> fn, int index) : fn_(std::move(fn)), index_(index) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list& /*inputs*/) override {
    fn_(index_);
    return outputs;
  }

 private:
  std::function<void(int)> fn_;
  int index_;
};

}  // namespace

at::Tensor grad_alias(const at::Tensor& flat, int64_t offset, at::IntArrayRef sizes) {
  at::NoGradGuard no_grad;
  at::Tensor alias = at::empty({0}, flat.options());
  alias.set_(flat.storage(), flat.storage_offset() + offset, sizes, c10::contiguous_strides(sizes));
  return alias;
}

GradReadyHooks::GradReadyHooks(const std::vector<at::Tensor>& params, std::function<void(int)> before,
                               std::function<void(int)> after) {
  for (size_t i = 0; i < params.size(); ++i) {
    const at::Tensor& p = params[i];
    if (!p.requires_grad()) continue;
    Registered r;
    r.accumulator = torch::autograd::impl::grad_accumulator(p);
    if (!r.accumulator) continue;  // not a leaf: nothing accumulates into its .grad
    if (before) {
      auto hook = std::make_unique<BeforeAccumulate>(before, int(i));
      r.pre_hook = hook.get();
      r.accumulator->add_pre_hook(std::move(hook));
    }
    if (after) r.post_hook = r.accumulator->add_post_hook(std::make_unique<AfterAccumulate>(after, int(i)));
    hooks_.push_back(std::move(r));
  }
}

GradReadyHooks::~GradReadyHooks() {
  for (auto& r : hooks_) {
    if (r.post_hook) r.accumulator->del_post_hook(r.post_hook);
    if (r.pre_hook) {
      auto& pre = r.accumulator->pre_hooks();
      pre.erase(std::remove_if(pre.begin(), pre.end(), [&](const auto& h) { return h.get() == r.pre_hook; }), pre.end());
    }
  }
}

void rearm_grad_aliases(std::vector<std::pair<std::string, at::Tensor>>& params, const std::vector<at::Tensor>& grad_views) {
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < params.size(); ++i) {
    at::Tensor& g = params[i].second.mutable_grad();
    if (g.is_same(grad_views[i])) continue;
    if (g.defined()) grad_views[i].copy_(g);
    g = grad_views[i];
  }
}

}  // namespace accel::engine
