// Placeholder parameters (see placeholder.hpp).
#include "trainer/models/placeholder.hpp"

namespace accel::train {
namespace {
thread_local std::optional<at::Device> active_device;
}  // namespace

at::Tensor make_placeholder(at::IntArrayRef shape, const at::TensorOptions& options) {
  return at::zeros({1}, options).expand(shape);
}

bool is_placeholder(const at::Tensor& t) {
  return t.defined() && t.numel() > 0 && int64_t(t.storage().nbytes()) < t.numel() * int64_t(t.element_size());
}

PlaceholderScope::PlaceholderScope(at::Device device) : previous_(active_device) { active_device = device; }
PlaceholderScope::~PlaceholderScope() { active_device = previous_; }
std::optional<at::Device> PlaceholderScope::active() { return active_device; }

at::Tensor new_parameter(at::IntArrayRef shape, at::ScalarType dtype) {
  if (active_device) return make_placeholder(shape, at::TensorOptions(dtype).device(*active_device));
  return at::zeros(shape, at::TensorOptions(dtype));
}

}  // namespace accel::train
