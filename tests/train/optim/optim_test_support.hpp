// Shared helpers for the optimizer tests: a small GPT-shaped named parameter set (2-D weights and
// embeddings, 1-D biases and LayerNorm parameters), seeded gradients, and a relative error measure.
// Include after tests/support/catch_with_torch.hpp.
#pragma once

#include <ATen/ATen.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "engine/optim/optimizer.hpp"

namespace accel::test {

// Largest |a - b| / max(|b|, floor) over all elements (a, b compared in fp64). `floor` keeps
// elements that are nearly zero from turning rounding noise into a huge relative error.
inline double max_rel_error(const at::Tensor& a, const at::Tensor& b, double floor = 1e-3) {
  const at::Tensor ad = a.detach().to(at::kDouble);
  const at::Tensor bd = b.detach().to(at::kDouble);
  return ((ad - bd).abs() / bd.abs().clamp_min(floor)).max().item<double>();
}

// Shapes like a one-block GPT: weights and embeddings decay (dim >= 2), the rest does not.
inline std::vector<std::pair<std::string, std::vector<int64_t>>> gpt_like_shapes() {
  return {{"wte.weight", {16, 8}},          {"h.0.ln_1.weight", {8}},  {"h.0.ln_1.bias", {8}},
          {"h.0.attn.c_attn.weight", {24, 8}}, {"h.0.attn.c_attn.bias", {24}}, {"h.0.mlp.c_fc.weight", {32, 8}},
          {"h.0.mlp.c_fc.bias", {32}},      {"ln_f.weight", {8}}};
}

// Leaf parameters (requires_grad) with seeded values, optionally in another dtype.
inline engine::NamedTensors make_params(uint64_t seed, at::ScalarType dtype = at::kFloat) {
  at::manual_seed(seed);
  engine::NamedTensors out;
  for (const auto& [name, shape] : gpt_like_shapes())
    out.emplace_back(name, (at::randn(shape) * 0.5).to(dtype).requires_grad_(true));
  return out;
}

// Deep copies (fresh leaves) of `params`, for a second optimizer over the same starting point.
inline engine::NamedTensors clone_params(const engine::NamedTensors& params) {
  engine::NamedTensors out;
  for (const auto& [name, p] : params) out.emplace_back(name, p.detach().clone().requires_grad_(true));
  return out;
}

// Seeded gradients for every parameter, one list per step (same order as the parameters).
inline std::vector<std::vector<at::Tensor>> make_grads(const engine::NamedTensors& params, int steps, uint64_t seed,
                                                       double scale = 1.0) {
  at::manual_seed(seed);
  std::vector<std::vector<at::Tensor>> out(steps);
  for (auto& step : out)
    for (const auto& [name, p] : params) step.push_back(at::randn(p.sizes()) * scale);
  return out;
}

// Sets p.grad() to a copy of each gradient (in the parameter's dtype).
inline void set_grads(const engine::NamedTensors& params, const std::vector<at::Tensor>& grads) {
  for (size_t i = 0; i < params.size(); ++i) {
    at::Tensor p = params[i].second;
    p.mutable_grad() = grads[i].to(p.scalar_type()).clone();
  }
}

}  // namespace accel::test
