#include "engine/placeholder.hpp"

namespace accel::engine {

at::Tensor make_placeholder(at::IntArrayRef shape, const at::TensorOptions& options) {
  return at::zeros({1}, options).expand(shape);
}

bool is_placeholder(const at::Tensor& t) {
  return t.defined() && t.numel() > 0 && int64_t(t.storage().nbytes()) < t.numel() * int64_t(t.element_size());
}

}  // namespace accel::engine
