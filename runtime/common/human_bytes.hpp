// Human-readable byte counts in binary units, torch-free: "512 B", "1.50 KiB", "12.3 MiB", "118 GiB".
// Invariant: three significant digits from 1 KiB up (two decimals below 10, one below 100), so
// columns of figures line up and compare at a glance; exact counts belong in JSON, not here.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace accel {

inline std::string human_bytes(double bytes) {
  static const char* const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  const char* sign = bytes < 0 ? "-" : "";
  if (bytes < 0) bytes = -bytes;
  int u = 0;
  while (bytes >= 1024.0 && u < 6) {
    bytes /= 1024.0;
    ++u;
  }
  char buf[48];
  if (u == 0) std::snprintf(buf, sizeof buf, "%s%.0f B", sign, bytes);
  else if (bytes < 9.995) std::snprintf(buf, sizeof buf, "%s%.2f %s", sign, bytes, units[u]);
  else if (bytes < 99.95) std::snprintf(buf, sizeof buf, "%s%.1f %s", sign, bytes, units[u]);
  else std::snprintf(buf, sizeof buf, "%s%.0f %s", sign, bytes, units[u]);
  return buf;
}

inline std::string human_bytes(int64_t bytes) { return human_bytes(double(bytes)); }

}  // namespace accel
