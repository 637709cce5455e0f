// See log.hpp. The only place the trainer's logging touches spdlog.
#include "runtime/common/log.hpp"

#include <spdlog/spdlog.h>

#include <cstdlib>

namespace accel::logging {

void info(const std::string& line) { spdlog::info("{}", line); }
void warn(const std::string& line) { spdlog::warn("{}", line); }
void debug(const std::string& line) { spdlog::debug("{}", line); }
bool debug_enabled() { return spdlog::should_log(spdlog::level::debug); }
bool info_enabled() { return spdlog::should_log(spdlog::level::info); }

void configure_from_env() {
  spdlog::set_pattern("%v");
  const char* level = std::getenv("ACCEL_LOG_LEVEL");
  if (!level || !*level) return;
  const auto parsed = spdlog::level::from_str(level);  // unknown names parse as "off": say so instead
  if (parsed != spdlog::level::off || std::string(level) == "off")
    spdlog::set_level(parsed);
  else
    spdlog::warn("ACCEL_LOG_LEVEL={} is not a level (trace, debug, info, warn, error, critical, off); using info", level);
}

}  // namespace accel::logging
