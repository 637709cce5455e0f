// How load_job's one diagnostic starts when a yaml-cpp exception escaped every reader: a missed
// case, with no key path or position, still reported as a configuration error (exit 2). The
// fuzzer (tests/fuzz) counts it as a finding. Kept out of job_loader.hpp, which torch code includes.
#pragma once

#include <string_view>

namespace accel::config {

inline constexpr std::string_view kUnguardedReadMessage = "could not read the configuration: ";

}  // namespace accel::config
