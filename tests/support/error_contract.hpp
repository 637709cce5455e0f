// The error contract of job loading, as a check shared by the fuzzer (tests/fuzz) and unit tests:
// a ConfigError names what is wrong and where (a key path, or a position in a file or an override),
// and is never the loader's fallback for a yaml-cpp exception that no reader guarded against.
#pragma once

#include <string>

#include "runtime/common/errors.hpp"
#include "runtime/config/unguarded_read.hpp"

namespace accel::test {

// Empty when `d` keeps the contract, else what it breaks.
inline std::string contract_violation(const Diagnostic& d) {
  if (d.message.empty()) return "a diagnostic without a message";
  if (d.message.rfind(config::kUnguardedReadMessage, 0) == 0)
    return "a yaml-cpp exception escaped the readers (no key path, no position)";
  if (d.where.origin == Location::Origin::File && (d.where.line < 1 || d.where.col < 1) &&
      d.message.rfind("cannot read the job file", 0) != 0)  // the one file-level error without a position
                                                              // (followed by the OS reason)
    return "a diagnostic in a file without line:col";
  if (d.where.origin == Location::Origin::Default && d.key_path.empty())
    return "a diagnostic with neither a key path nor a place";
  return {};
}

// Empty when every diagnostic of `e` keeps the contract; else the first violation and its text.
inline std::string contract_violation(const ConfigError& e) {
  if (e.diagnostics().empty()) return "a ConfigError without diagnostics";
  for (const auto& d : e.diagnostics())
    if (auto why = contract_violation(d); !why.empty()) return why + ":\n" + d.render();
  return {};
}

}  // namespace accel::test
