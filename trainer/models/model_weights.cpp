// A model's weights as safetensors (see model_weights.hpp).
#include "trainer/models/model_weights.hpp"

#include <sstream>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/grad_mode.h>

#include "engine/format/safetensors.hpp"
#include "runtime/common/errors.hpp"

namespace accel::train {

namespace {

std::string shape_text(at::IntArrayRef shape) {
  std::ostringstream out;
  out << shape;
  return out.str();
}

// The file's header against the model: every parameter present with its shape and a floating
// dtype, and no other name.
void check_weights_file(const engine::SafetensorsReader& reader, const engine::NamedTensors& params) {
  const std::string where = "weights file '" + reader.path() + "'";
  for (const auto& [name, param] : params) {
    const engine::SafetensorsReader::Info* info = reader.find(name);
    if (!info) throw RunError(where + ": parameter '" + name + "' is missing");
    if (at::IntArrayRef(info->shape) != param.sizes())
      throw RunError(where + ": parameter '" + name + "' has shape " + shape_text(info->shape) + ", the model needs " +
                     shape_text(param.sizes()));
    if (!at::isFloatingType(info->dtype))
      throw RunError(where + ": parameter '" + name + "' has non-floating dtype " + engine::safetensors_dtype_name(info->dtype));
  }
  if (reader.tensors().size() != params.size()) {
    std::string extra;
    for (const auto& info : reader.tensors()) {
      bool known = false;
      for (const auto& p : params) known = known || p.first == info.name;
      if (!known) extra += (extra.empty() ? "'" : ", '") + info.name + "'";
    }
    throw RunError(where + ": names the model does not have: " + extra + " (is it a different model?)");
  }
}

}  // namespace

void load_weights_into(const engine::NamedTensors& params, const std::string& path) {
  engine::SafetensorsReader reader(path);
  check_weights_file(reader, params);
  torch::NoGradGuard no_grad;
  for (const auto& [name, param] : params) param.copy_(reader.read(name));
}

WeightsFileSource::WeightsFileSource(const engine::NamedTensors& params, const std::string& path) : reader_(path) {
  check_weights_file(reader_, params);
}

void WeightsFileSource::fill(const std::string& name, const at::Tensor& param, int64_t begin, at::Tensor dest) {
  torch::NoGradGuard no_grad;
  // As load_weights_into would hold it in the parameter, then in the engine's buffer.
  dest.view(-1).copy_(reader_.read_range(name, begin, dest.numel()).to(param.scalar_type()));
}

}  // namespace accel::train
