// Small string helpers shared by the torch-free code and the rest: one definition each, so
// messages that list allowed values read the same everywhere.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

namespace accel {

// "a, b, c" (or with another separator, e.g. "; " for notes).
inline std::string join(const std::vector<std::string>& items, const std::string& separator = ", ") {
  std::string s;
  for (size_t i = 0; i < items.size(); ++i) s += (i ? separator : "") + items[i];
  return s;
}

// The first `limit` items as join() writes them, then ", ... (N in all)" when there are more: a
// list in a message that stays short however long the list is.
inline std::string join_first(const std::vector<std::string>& items, size_t limit) {
  std::string s = join(std::vector<std::string>(items.begin(), items.begin() + std::min(items.size(), limit)));
  if (items.size() > limit) s += ", ... (" + std::to_string(items.size()) + " in all)";
  return s;
}

// `s` without leading and trailing spaces, tabs and line ends.
inline std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

}  // namespace accel
