// The prefetch schedule lives with the resolved plan (runtime/config/plan/prefetch_policy.hpp);
// the engine's code names it here.
#pragma once

#include "runtime/config/plan/prefetch_policy.hpp"

namespace accel::engine {
using plan::PrefetchPolicy;
}  // namespace accel::engine
