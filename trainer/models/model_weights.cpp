// A model's weights as safetensors (see model_weights.hpp).
#include "trainer/models/model_weights.hpp"

#include <map>
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
}  // namespace

void load_weights_into(const NamedTensors& params, const std::string& path) {
  std::map<std::string, at::Tensor> file;
  for (auto& [name, tensor] : load_safetensors(path)) file.emplace(name, std::move(tensor));

  const std::string where = "weights file '" + path + "'";
  for (const auto& [name, param] : params) {
    auto it = file.find(name);
    if (it == file.end()) throw RunError(where + ": parameter '" + name + "' is missing");
    const at::Tensor& t = it->second;
    if (t.sizes() != param.sizes())
      throw RunError(where + ": parameter '" + name + "' has shape " + shape_text(t.sizes()) + ", the model needs " +
                     shape_text(param.sizes()));
    if (!at::isFloatingType(t.scalar_type()))
      throw RunError(where + ": parameter '" + name + "' has non-floating dtype " +
                     safetensors_dtype_name(t.scalar_type()));
  }
  if (file.size() != params.size()) {
    std::string extra;
    for (const auto& [name, tensor] : file) {
      bool known = false;
      for (const auto& p : params) known = known || p.first == name;
      if (!known) extra += (extra.empty() ? "'" : ", '") + name + "'";
    }
    throw RunError(where + ": names the model does not have: " + extra + " (is it a different model?)");
  }
  torch::NoGradGuard no_grad;
  for (const auto& [name, param] : params) param.copy_(file.at(name));
}

}  // namespace accel::train
