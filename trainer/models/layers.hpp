// Parameter-owning leaf modules the units are built from: Linear (weight [out, in], bias [out]),
// LayerNorm (weight, bias, eps 1e-5), RMSNorm (weight) and a lookup table ([rows, dim]). They exist so parameter
// names follow the module tree ("attn.c_attn.weight") and so construction never touches any RNG:
// parameters start as zeros in the requested dtype (placeholders inside a PlaceholderScope,
// placeholder.hpp); values come from spec_init, a weights file or the engine's unit source.
#pragma once

#include <cstdint>

#include <torch/nn/module.h>

namespace accel::train {

class LinearLayer : public torch::nn::Module {
 public:
  // `with_bias` false: no bias parameter is registered (llama's projections).
  LinearLayer(int64_t in_features, int64_t out_features, at::ScalarType dtype, bool with_bias = true);
  at::Tensor forward(const at::Tensor& x) const;  // x @ weight^T (+ bias)

  at::Tensor weight;  // [out, in]
  at::Tensor bias;    // [out]; undefined without a bias
};

// RMSNorm as transformers' LlamaRMSNorm computes it: in float32, x * rsqrt(mean(x^2) + eps), cast
// back to x's dtype, then times weight (no bias).
class RmsNormLayer : public torch::nn::Module {
 public:
  RmsNormLayer(int64_t dim, double eps, at::ScalarType dtype);
  at::Tensor forward(const at::Tensor& x) const;  // over the last dimension

  at::Tensor weight;  // [dim]

 private:
  double eps_;
};

class LayerNormLayer : public torch::nn::Module {
 public:
  static constexpr double kEps = 1e-5;
  LayerNormLayer(int64_t dim, at::ScalarType dtype);
  at::Tensor forward(const at::Tensor& x) const;  // over the last dimension

  at::Tensor weight;  // [dim]
  at::Tensor bias;    // [dim]
};

class TableLayer : public torch::nn::Module {
 public:
  TableLayer(int64_t rows, int64_t dim, at::ScalarType dtype);

  at::Tensor weight;  // [rows, dim]
};

}  // namespace accel::train
