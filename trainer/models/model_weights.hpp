// A model's full weights as a safetensors file under the spec names (the export and `init_from`
// format of spec/training.md). Invariant: load_weights_into changes the model only when the file
// has exactly the model's parameter names with the model's shapes; values are converted to each
// parameter's dtype and device.
#pragma once

#include <string>

#include "engine/named_tensors.hpp"

namespace accel::train {

// Loads `path` into a model's parameters, (spec name, parameter) as BuiltinModule::spec_parameters
// gives them. Throws accel::RunError naming the file and the parameter for: a missing parameter, a
// shape mismatch, a non-floating dtype, or extra names. (Saving is save_safetensors of the same list.)
void load_weights_into(const NamedTensors& params, const std::string& path);

}  // namespace accel::train
