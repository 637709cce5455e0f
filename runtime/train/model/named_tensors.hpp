// (name, tensor) pairs in a meaningful order: a model's parameters under their spec names, a file's tensors.
#pragma once

#include <ATen/ATen.h>

#include <string>
#include <utility>
#include <vector>

namespace accel::train {

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

}  // namespace accel::train
