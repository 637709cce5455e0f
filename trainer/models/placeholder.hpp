// The built-in models' layers built with placeholder parameters (engine/placeholder.hpp) instead of
// values, for the trainer's sharded initialization (docs/design/0023).
#pragma once

#include <ATen/ATen.h>

#include <optional>

#include "engine/placeholder.hpp"

namespace accel::train {

using engine::is_placeholder;
using engine::make_placeholder;

// While one lives on this thread, the built-in models' layers (layers.hpp) create placeholders on
// `device` instead of zero-filled parameters. Scopes nest; the innermost wins.
class PlaceholderScope {
 public:
  explicit PlaceholderScope(at::Device device);
  ~PlaceholderScope();
  PlaceholderScope(const PlaceholderScope&) = delete;
  PlaceholderScope& operator=(const PlaceholderScope&) = delete;
  // The device of the innermost live scope on this thread, if any.
  static std::optional<at::Device> active();

 private:
  std::optional<at::Device> previous_;
};

// A new parameter tensor for a built-in layer: zeros, or a placeholder inside a PlaceholderScope.
at::Tensor new_parameter(at::IntArrayRef shape, at::ScalarType dtype);

}  // namespace accel::train
