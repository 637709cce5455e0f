// Parameter-owning leaf modules (see layers.hpp).
#include "trainer/models/layers.hpp"

#include <ATen/ATen.h>

#include "trainer/models/placeholder.hpp"

namespace accel::train {

namespace {
at::Tensor zeros(at::IntArrayRef shape, at::ScalarType dtype) { return new_parameter(shape, dtype); }
}  // namespace

LinearLayer::LinearLayer(int64_t in_features, int64_t out_features, at::ScalarType dtype) {
  weight = register_parameter("weight", zeros({out_features, in_features}, dtype));
  bias = register_parameter("bias", zeros({out_features}, dtype));
}

at::Tensor LinearLayer::forward(const at::Tensor& x) const { return at::linear(x, weight, bias); }

LayerNormLayer::LayerNormLayer(int64_t dim, at::ScalarType dtype) {
  weight = register_parameter("weight", zeros({dim}, dtype));
  bias = register_parameter("bias", zeros({dim}, dtype));
}

at::Tensor LayerNormLayer::forward(const at::Tensor& x) const {
  return at::layer_norm(x, {weight.size(0)}, weight, bias, kEps);
}

TableLayer::TableLayer(int64_t rows, int64_t dim, at::ScalarType dtype) {
  weight = register_parameter("weight", zeros({rows, dim}, dtype));
}

}  // namespace accel::train
