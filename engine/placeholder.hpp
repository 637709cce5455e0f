// Placeholder parameters (docs/design/0023): a parameter's full shape and dtype over one element of
// storage (zero strides), on the device it will compute on. An ordinary dense tensor to libtorch: it
// can be registered, an optimizer can be built over it, and the sharding engine gives it storage
// with set_data (which a meta tensor refuses). Its values are not the parameter's: a model of
// placeholders is filled by the engine from a unit source (unit_source.hpp).
#pragma once

#include <ATen/ATen.h>

namespace accel::engine {

at::Tensor make_placeholder(at::IntArrayRef shape, const at::TensorOptions& options);
// Whether `t` holds fewer values than its shape has elements (a placeholder, or another expanded view).
bool is_placeholder(const at::Tensor& t);

}  // namespace accel::engine
