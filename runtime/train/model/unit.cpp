// Units and unit hooks (see unit.hpp).
#include "runtime/train/model/unit.hpp"

namespace accel::train {

Unit::Unit(std::string unit_name, std::string param_prefix, std::string class_name)
    : torch::nn::Module(class_name.empty() ? unit_name : class_name), unit_name_(std::move(unit_name)), param_prefix_(std::move(param_prefix)) {}

NamedTensors Unit::named_parameters_in_order() const {
  NamedTensors out;
  // Module::named_parameters visits a module's own parameters, then its children in registration
  // order (pre-order), so registration order is spec order.
  for (const auto& item : named_parameters(/*recurse=*/true)) {
    std::string name = param_prefix_.empty() ? item.key() : param_prefix_ + "." + item.key();
    out.emplace_back(std::move(name), item.value());
  }
  return out;
}

at::Tensor UnitHooks::pre_forward(Unit&, at::Tensor x) { return x; }
at::Tensor UnitHooks::post_forward(Unit&, at::Tensor y) { return y; }

}  // namespace accel::train
