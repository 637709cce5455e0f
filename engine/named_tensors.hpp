// A named tensor list: (full name, tensor) pairs in a meaningful order, such as a model's
// parameters in flat order, an optimizer's state or a safetensors file's contents. One alias for
// every layer (the engines, the optimizer, the API and the trainer), so lists pass between them
// without conversion.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <utility>
#include <vector>

namespace accel::engine {

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

}  // namespace accel::engine
