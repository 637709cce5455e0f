#include "runtime/common/errors.hpp"

#include <sstream>

namespace accel {

std::string Location::str() const {
  switch (origin) {
    case Origin::Default: return "default";
    case Origin::File: {
      std::string s = file;
      if (line > 0) s += ":" + std::to_string(line) + ":" + std::to_string(col);
      if (!detail.empty()) s += " (" + detail + ")";
      return s;
    }
    case Origin::Environment: return "environment " + detail;
    // A --set item ("a.b=1"), or a launch flag or program already written as typed ("--num_processes 2").
    case Origin::CommandLine: return detail.rfind("--", 0) == 0 || detail.rfind("accel ", 0) == 0 ? detail : "--set " + detail;
    case Origin::Derived: return "derived (" + detail + ")";
  }
  return "?";
}

std::string Diagnostic::render(const char* severity) const {
  std::ostringstream out;
  out << where.str() << ": " << severity << ": ";
  if (!key_path.empty()) out << key_path << ": ";
  out << message;
  if (!value.empty()) out << "\n  value:   " << value;
  if (!allowed.empty()) out << "\n  allowed: " << allowed;
  if (!hint.empty()) out << "\n  fix:     " << hint;
  return out.str();
}

static std::string join_rendered(const std::vector<Diagnostic>& diagnostics) {
  std::string text;
  for (const auto& d : diagnostics) {
    if (!text.empty()) text += "\n";
    text += d.render();
  }
  return text;
}

ConfigError::ConfigError(std::vector<Diagnostic> diagnostics)
    : std::runtime_error(join_rendered(diagnostics)), diagnostics_(std::move(diagnostics)) {}

}  // namespace accel
