// Placeholder parameters (docs/design/0023): a parameter's full shape and dtype over one element of
// storage (zero strides), on the device it will compute on. An ordinary dense tensor to libtorch: it
// can be registered, an optimizer can be built over it, and the sharding engine gives it storage
// with set_data (which a meta tensor refuses). Its values are not the parameter's: a model of
// placeholders is filled by the engine from a unit source (engine/unit_source.hpp).
#pragma once

#include <ATen/ATen.h>

#include <optional>

namespace accel::train {

at::Tensor make_placeholder(at::IntArrayRef shape, const at::TensorOptions& options);
// Whether `t` holds fewer values than its shape has elements (a placeholder, or another expanded view).
bool is_placeholder(const at::Tensor& t);

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
