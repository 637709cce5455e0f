// The names of the shared-memory segments rank 0 creates (runtime/comm/shm_collectives.hpp) and the
// launcher removes (runtime/launch/shm_sweep.hpp): /accel-shm-<launcher pid>-<pid namespace>-<random>.
// The launcher's pid lets it remove what its workers left; the pid namespace (the inode of
// /proc/self/ns/pid) lets a later launcher tell a segment of a launcher that is gone from one of a
// live launcher in another namespace that shares /dev/shm, whose pid means nothing here.
#pragma once

#include <string>
#include <sys/stat.h>
#include <sys/types.h>

namespace accel::shm_name {

inline unsigned long long pid_namespace_id() {
  struct stat st {};
  return stat("/proc/self/ns/pid", &st) == 0 ? static_cast<unsigned long long>(st.st_ino) : 0ULL;
}

// "accel-shm-<launcher>-<this pid namespace>-" (no leading '/'): what every segment of the workers of
// `launcher` (a pid in this process's namespace) starts with.
inline std::string segment_prefix(pid_t launcher) {
  return "accel-shm-" + std::to_string(launcher) + "-" + std::to_string(pid_namespace_id()) + "-";
}

}  // namespace accel::shm_name
