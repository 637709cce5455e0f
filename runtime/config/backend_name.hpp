// A `backend:` value: the name of a registered dialect (runtime/config/plan/resolve_plan.hpp's
// registry, docs/design/0022). The three accel ships are named here; a dialect registered from
// outside (a test's, a plugin's) is a Backend of its own name. The schema checks a job's value
// against the names registered when it loads, so a job never holds an unknown one.
#pragma once

#include <string>

namespace accel::config {

struct Backend {
  std::string name;

  static const Backend ddp;
  static const Backend deepspeed;
  static const Backend fsdp;

  friend bool operator==(const Backend&, const Backend&) = default;
};

inline const Backend Backend::ddp{"ddp"};
inline const Backend Backend::deepspeed{"deepspeed"};
inline const Backend Backend::fsdp{"fsdp"};

// The YAML spelling, as for the enums (enums.hpp's to_string).
inline std::string to_string(const Backend& backend) { return backend.name; }

}  // namespace accel::config
