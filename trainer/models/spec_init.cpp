// Seeded spec initialisation (see spec_init.hpp for the rules and the RNG order).
#include "trainer/models/spec_init.hpp"

#include <cmath>
#include <stdexcept>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/csrc/autograd/grad_mode.h>

namespace accel::train {

namespace {
bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
bool is_layer_norm_weight(const std::string& name) {
  return ends_with(name, "ln_1.weight") || ends_with(name, "ln_2.weight") || ends_with(name, "ln_f.weight") ||
         ends_with(name, "input_layernorm.weight") || ends_with(name, "post_attention_layernorm.weight") ||
         name == "norm.weight";
}
}  // namespace

InitRule spec_init_rule(const std::string& spec_name, int n_layer) {
  if (ends_with(spec_name, ".bias")) return {InitRule::Kind::zeros, 0.0};
  if (is_layer_norm_weight(spec_name)) return {InitRule::Kind::ones, 0.0};
  if (ends_with(spec_name, "c_proj.weight")) {
    if (n_layer <= 0) throw std::invalid_argument("spec init: n_layer must be positive for " + spec_name);
    return {InitRule::Kind::normal, kInitStd / std::sqrt(2.0 * n_layer)};
  }
  if (ends_with(spec_name, ".weight")) return {InitRule::Kind::normal, kInitStd};
  throw std::invalid_argument("spec init: no rule for parameter '" + spec_name + "'");
}

void initialize_in_spec_order(const engine::NamedTensors& parameters, int n_layer, uint64_t seed) {
  torch::NoGradGuard no_grad;
  at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  for (const auto& [name, param] : parameters) {
    const InitRule rule = spec_init_rule(name, n_layer);
    switch (rule.kind) {
      case InitRule::Kind::zeros: param.zero_(); break;
      case InitRule::Kind::ones: param.fill_(1.0); break;
      case InitRule::Kind::normal: {
        at::Tensor draw = at::empty(param.sizes(), at::TensorOptions(at::kDouble));
        draw.normal_(0.0, rule.std, generator);
        param.copy_(draw.to(at::kFloat));
        break;
      }
    }
  }
}

}  // namespace accel::train
