// The placeholder scope of the built-in layers (see placeholder.hpp).
#include "trainer/models/placeholder.hpp"

namespace accel::train {
namespace {
thread_local std::optional<at::Device> active_device;
}  // namespace

PlaceholderScope::PlaceholderScope(at::Device device) : previous_(active_device) { active_device = device; }
PlaceholderScope::~PlaceholderScope() { active_device = previous_; }
std::optional<at::Device> PlaceholderScope::active() { return active_device; }

at::Tensor new_parameter(at::IntArrayRef shape, at::ScalarType dtype) {
  if (active_device) return make_placeholder(shape, at::TensorOptions(dtype).device(*active_device));
  return at::zeros(shape, at::TensorOptions(dtype));
}

}  // namespace accel::train
