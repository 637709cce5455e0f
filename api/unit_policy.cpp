#include "api/unit_policy.hpp"

#include <algorithm>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "api/unit_sink.hpp"

namespace accel::api {

namespace {

// "accel::UnitImpl<ns::BlockImpl, at::Tensor (ns::BlockImpl::*)(at::Tensor)>" -> "ns::BlockImpl".
std::string unwrapped(const std::string& name) {
  const std::string prefix = "accel::UnitImpl<";
  if (name.rfind(prefix, 0) != 0) return name;
  int depth = 0;
  for (size_t i = prefix.size(); i < name.size(); ++i) {
    const char c = name[i];
    if (c == '<' || c == '(') ++depth;
    if (c == '>' || c == ')') --depth;
    if (depth < 0 || (depth == 0 && c == ',')) return name.substr(prefix.size(), i - prefix.size());
  }
  return name;
}

}  // namespace

bool class_matches(const std::string& wrapped_name, const std::string& wanted) {
  if (wanted.empty()) return false;
  const std::string module_name = unwrapped(wrapped_name);
  auto bare = [](const std::string& s) {
    const size_t colon = s.rfind("::");
    return colon == std::string::npos ? s : s.substr(colon + 2);
  };
  for (const std::string& name : {module_name, bare(module_name)})
    for (const std::string& w : {wanted, bare(wanted)})
      if (name == w || name == w + "Impl") return true;
  return false;
}

bool glob_matches(const std::string& text, const std::string& pattern) {
  // Iterative wildcard match with backtracking to the last '*'.
  size_t t = 0, p = 0, star = std::string::npos, mark = 0;
  while (t < text.size()) {
    if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      mark = t;
    } else if (p < pattern.size() && pattern[p] == text[t]) {
      ++p;
      ++t;
    } else if (star != std::string::npos) {
      p = star + 1;
      t = ++mark;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

std::vector<std::string> module_classes(torch::nn::Module& root) {
  std::set<std::string> names;
  for (const auto& m : root.modules(/*include_self=*/false)) names.insert(unwrapped(m->name()));
  return {names.begin(), names.end()};
}

namespace {

struct Walk {
  const UnitPolicy& policy;
  const std::unordered_map<const void*, std::string>& canonical;  // trainable parameter -> its first name
  const bool wrapped_model;  // design B: wrappers make the units, the policy only adds outside them
  std::unordered_set<const void*> claimed;
  std::vector<PolicyUnit> units;

  bool matches(const std::string& path, const torch::nn::Module& m, int64_t numel, int depth) const {
    if (policy.empty()) return !wrapped_model && depth == 1;
    for (const auto& c : policy.classes)
      if (class_matches(m.name(), c)) return true;
    for (const auto& g : policy.name_patterns)
      if (glob_matches(path, g)) return true;
    if (policy.min_params > 0 && numel >= policy.min_params) return true;
    return policy.predicate && policy.predicate(path, m);
  }

  void visit(torch::nn::Module& m, const std::string& path, int depth, bool in_wrapper) {
    const bool wrapper = depth > 0 && unit_tag(m) != nullptr;
    for (const auto& child : m.named_children())
      visit(*child.value(), path.empty() ? child.key() : path + "." + child.key(), depth + 1, in_wrapper || wrapper);
    if (depth == 0) return;  // the root is never a unit of its own: what is left goes to "root"
    PolicyUnit unit{path, {}, wrapper ? &m : nullptr};
    std::unordered_set<const void*> mine;
    int64_t numel = 0;
    for (const auto& p : m.named_parameters(/*recurse=*/true)) {
      const void* key = p.value().unsafeGetTensorImpl();
      auto it = canonical.find(key);
      if (it == canonical.end() || claimed.count(key) || !mine.insert(key).second) continue;
      unit.params.emplace_back(it->second, p.value());
      numel += p.value().numel();
    }
    if (unit.params.empty() || !(wrapper || (!in_wrapper && matches(path, m, numel, depth)))) return;
    claimed.insert(mine.begin(), mine.end());
    units.push_back(std::move(unit));
  }
};

}  // namespace

std::vector<PolicyUnit> apply_unit_policy(torch::nn::Module& root, const UnitPolicy& policy) {
  std::unordered_map<const void*, std::string> canonical;
  std::unordered_map<const void*, std::vector<std::string>> every_name;  // a tied tensor has several
  std::unordered_map<const void*, size_t> position;
  std::vector<std::pair<std::string, at::Tensor>> ordered;
  for (const auto& p : root.named_parameters(/*recurse=*/true)) {
    const void* key = p.value().unsafeGetTensorImpl();
    every_name[key].push_back(p.key());
    if (!p.value().requires_grad() || canonical.count(key)) continue;
    canonical.emplace(key, p.key());
    position.emplace(key, ordered.size());
    ordered.emplace_back(p.key(), p.value());
  }
  Walk walk{policy, canonical, has_unit_wrappers(root), {}, {}};
  walk.visit(root, "", 0, false);
  // A wrapper's parameter registered outside it too is read outside its boundaries: the root's.
  for (auto& u : walk.units) {
    if (!u.boundary) continue;
    auto outside = [&](const auto& named) {
      for (const auto& name : every_name.at(named.second.unsafeGetTensorImpl()))
        if (name.rfind(u.name + ".", 0) != 0) return true;
      return false;
    };
    for (const auto& named : u.params)
      if (outside(named)) walk.claimed.erase(named.second.unsafeGetTensorImpl());
    u.params.erase(std::remove_if(u.params.begin(), u.params.end(), outside), u.params.end());
  }
  walk.units.erase(std::remove_if(walk.units.begin(), walk.units.end(), [](const PolicyUnit& u) { return u.params.empty(); }),
                   walk.units.end());
  auto first = [&](const PolicyUnit& u) { return position.at(u.params.front().second.unsafeGetTensorImpl()); };
  for (auto& u : walk.units)
    std::sort(u.params.begin(), u.params.end(), [&](const auto& a, const auto& b) {
      return position.at(a.second.unsafeGetTensorImpl()) < position.at(b.second.unsafeGetTensorImpl());
    });
  std::stable_sort(walk.units.begin(), walk.units.end(),
                   [&](const PolicyUnit& a, const PolicyUnit& b) { return first(a) < first(b); });
  PolicyUnit rest{"root", {}};
  for (const auto& [name, p] : ordered)
    if (!walk.claimed.count(p.unsafeGetTensorImpl())) rest.params.emplace_back(name, p);
  std::vector<PolicyUnit> out;
  if (!rest.params.empty()) out.push_back(std::move(rest));
  for (auto& u : walk.units) out.push_back(std::move(u));
  return out;
}

}  // namespace accel::api
