// The mlp model's layer (see mlp_layer_unit.hpp).
#include "trainer/models/mlp_layer_unit.hpp"

#include "trainer/models/placeholder.hpp"

#include <ATen/ATen.h>

namespace accel::train {

MlpLayerUnit::MlpLayerUnit(int64_t n_embd, bool apply_gelu, at::ScalarType dtype)
    : torch::nn::Module("MlpLayer"), apply_gelu_(apply_gelu) {
  weight_ = register_parameter("weight", new_parameter({n_embd, n_embd}, dtype));
  bias_ = register_parameter("bias", new_parameter({n_embd}, dtype));
}

at::Tensor MlpLayerUnit::forward(const at::Tensor& x) const {
  at::Tensor y = at::linear(x, weight_, bias_);
  return apply_gelu_ ? at::gelu(y, "tanh") : y;
}

}  // namespace accel::train
