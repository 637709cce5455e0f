// Worker log lines (spdlog underneath), behind a header without spdlog or fmt. Why: torch's wheel
// ships its own fmt (12.x) on the include path, and Debian's spdlog 1.10 needs fmt 9, so a file
// that includes both torch and spdlog does not compile. Torch code logs finished strings here;
// only log.cpp (no torch) sees spdlog.
#pragma once

#include <string>

namespace accel::logging {

void info(const std::string& line);
void warn(const std::string& line);
void debug(const std::string& line);
bool debug_enabled();  // true when debug lines are printed (skip building expensive ones otherwise)
bool info_enabled();   // false under ACCEL_LOG_LEVEL=warn and above

// Plain lines ("%v"), at the level ACCEL_LOG_LEVEL names (trace, debug, info, warn, error,
// critical, off); an unknown name keeps info and says so. Call once, before logging.
void configure_from_env();

}  // namespace accel::logging
