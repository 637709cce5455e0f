#include "engine/unit_spec.hpp"

#include <set>

#include "runtime/common/errors.hpp"

namespace accel::engine {

void check_unit_specs(const std::vector<UnitSpec>& units, size_t groups, const std::string& who) {
  std::set<std::string> unit_names, param_names;
  std::set<const void*> tensors;
  for (const auto& u : units) {
    if (!unit_names.insert(u.name).second) throw RunError(who + ": two units are named '" + u.name + "'");
    if (u.groups.size() != u.params.size())
      throw RunError(who + ": unit '" + u.name + "' gives " + std::to_string(u.groups.size()) + " groups for " +
                     std::to_string(u.params.size()) + " parameters");
    for (size_t k = 0; k < u.params.size(); ++k) {
      const auto& [name, p] = u.params[k];
      if (!p.defined()) throw RunError(who + ": parameter '" + name + "' is undefined");
      if (!param_names.insert(name).second) throw RunError(who + ": two parameters are named '" + name + "'");
      if (!tensors.insert(p.unsafeGetTensorImpl()).second)
        throw RunError(who + ": parameter '" + name + "' is listed twice (a tied parameter belongs to one unit)");
      if (u.groups[k] < 0 || size_t(u.groups[k]) >= groups)
        throw RunError(who + ": parameter '" + name + "' is in no optimizer group");
    }
  }
}

bool has_unit_boundaries(const std::vector<UnitSpec>& units) {
  for (const auto& u : units)
    if (!u.module && !u.pinned) return false;
  return true;
}

NamedTensors all_parameters(const std::vector<UnitSpec>& units) {
  NamedTensors out;
  for (const auto& u : units) out.insert(out.end(), u.params.begin(), u.params.end());
  return out;
}

}  // namespace accel::engine
