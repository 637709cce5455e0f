// Wall-clock time comparable across the processes of one machine (CLOCK_REALTIME), for the
// launcher-to-worker delays `accel bench launch` measures.
#pragma once

#include <chrono>
#include <cstdint>

namespace accel {

// Nanoseconds since the epoch.
inline int64_t realtime_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace accel
