// Small string helpers shared by the torch-free code and the rest: one definition each, so
// messages that list allowed values read the same everywhere.
#pragma once

#include <string>
#include <vector>

namespace accel {

// "a, b, c" (or with another separator, e.g. "; " for notes).
inline std::string join(const std::vector<std::string>& items, const std::string& separator = ", ") {
  std::string s;
  for (size_t i = 0; i < items.size(); ++i) s += (i ? separator : "") + items[i];
  return s;
}

// `s` without leading and trailing spaces, tabs and line ends.
inline std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

}  // namespace accel
