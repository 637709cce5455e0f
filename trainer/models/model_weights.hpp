// A model's full weights as a safetensors file under the spec names (the export and `init_from`
// format of spec/training.md). Invariant: load_weights_into changes the model only when the file
// has exactly the model's parameter names with the model's shapes; values are converted to each
// parameter's dtype and device.
#pragma once

#include <memory>
#include <string>

#include "engine/format/safetensors.hpp"
#include "engine/named_tensors.hpp"
#include "engine/unit_source.hpp"

namespace accel::train {

// Loads `path` into a model's parameters, (spec name, parameter) as BuiltinModule::spec_parameters
// gives them. Throws accel::RunError naming the file and the parameter for: a missing parameter, a
// shape mismatch, a non-floating dtype, or extra names. (Saving is save_safetensors of the same list.)
void load_weights_into(const engine::NamedTensors& params, const std::string& path);

// The same file as the engine's unit source (engine/unit_source.hpp): checked as load_weights_into
// checks it, from its header alone, then read in the element ranges the engine asks for, so each
// rank reads its own slices and the file is never whole in memory (docs/design/0023). `params`
// may be placeholders (only names, shapes and dtypes are read); values are converted to each
// parameter's dtype, then to the engine's.
class WeightsFileSource final : public engine::UnitSource {
 public:
  WeightsFileSource(const engine::NamedTensors& params, const std::string& path);
  void fill(const std::string& name, const at::Tensor& param, int64_t begin, at::Tensor dest) override;
  std::string describe() const override { return "weights file '" + reader_.path() + "'"; }
  uint64_t data_bytes_read() const { return reader_.data_bytes_read(); }

 private:
  engine::SafetensorsReader reader_;
};

}  // namespace accel::train
