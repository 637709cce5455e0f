// A model's full weights as a safetensors file under the spec names (the export and `init_from`
// format of spec/training.md). Invariant: load_weights_into changes the model only when the file
// has exactly the model's parameter names with the model's shapes; values are converted to each
// parameter's dtype and device.
#pragma once

#include <string>

#include "runtime/train/model/model.hpp"

namespace accel::train {

// Writes model.named_parameters() (spec order) to `path`, atomically.
void save_model_weights(Model& model, const std::string& path);

// Loads `path` into the model's parameters. Throws accel::RunError naming the file and the
// parameter for: a missing parameter, a shape mismatch, a non-floating dtype, or extra names.
void load_weights_into(Model& model, const std::string& path);
// The same for a list of (spec name, parameter), as the built-in models as modules give it.
void load_weights_into(const NamedTensors& params, const std::string& path);

}  // namespace accel::train
