// Parameter-owning leaf modules (see layers.hpp).
#include "trainer/models/layers.hpp"

#include <ATen/ATen.h>

#include "trainer/models/placeholder.hpp"

namespace accel::train {

namespace {
at::Tensor zeros(at::IntArrayRef shape, at::ScalarType dtype) { return new_parameter(shape, dtype); }
}  // namespace

LinearLayer::LinearLayer(int64_t in_features, int64_t out_features, at::ScalarType dtype, bool with_bias) {
  weight = register_parameter("weight", zeros({out_features, in_features}, dtype));
  if (with_bias) bias = register_parameter("bias", zeros({out_features}, dtype));
}

at::Tensor LinearLayer::forward(const at::Tensor& x) const { return at::linear(x, weight, bias); }

LayerNormLayer::LayerNormLayer(int64_t dim, at::ScalarType dtype) {
  weight = register_parameter("weight", zeros({dim}, dtype));
  bias = register_parameter("bias", zeros({dim}, dtype));
}

at::Tensor LayerNormLayer::forward(const at::Tensor& x) const {
  return at::layer_norm(x, {weight.size(0)}, weight, bias, kEps);
}

RmsNormLayer::RmsNormLayer(int64_t dim, double eps, at::ScalarType dtype) : eps_(eps) {
  weight = register_parameter("weight", zeros({dim}, dtype));
}

at::Tensor RmsNormLayer::forward(const at::Tensor& x) const {
  const at::Tensor x32 = x.to(at::kFloat);
  const at::Tensor variance = x32.pow(2).mean(-1, /*keepdim=*/true);
  return weight * (x32 * at::rsqrt(variance + eps_)).to(x.scalar_type());
}

TableLayer::TableLayer(int64_t rows, int64_t dim, at::ScalarType dtype) {
  weight = register_parameter("weight", zeros({rows, dim}, dtype));
}

}  // namespace accel::train
