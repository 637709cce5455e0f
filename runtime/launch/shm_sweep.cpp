// Removes the shared-memory segments a launcher's workers left; see shm_sweep.hpp.
#include "runtime/launch/shm_sweep.hpp"

#include <cerrno>
#include <csignal>
#include <dirent.h>
#include <fcntl.h>
#include <functional>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/common/shm_segment_name.hpp"

namespace accel::launch {

namespace {

// Unlinks each /dev/shm entry of this user, a regular file, whose name `wanted` accepts.
int remove_segments(const std::function<bool(const std::string&)>& wanted) noexcept {
  DIR* dir = opendir("/dev/shm");
  if (!dir) return 0;
  int removed = 0;
  while (dirent* entry = readdir(dir)) {
    try {
      if (!wanted(entry->d_name)) continue;
    } catch (...) {
      continue;
    }
    struct stat st {};
    if (fstatat(dirfd(dir), entry->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (!S_ISREG(st.st_mode) || st.st_uid != geteuid()) continue;
    if (unlinkat(dirfd(dir), entry->d_name, 0) == 0) ++removed;
  }
  closedir(dir);
  return removed;
}

}  // namespace

std::string worker_segment_prefix(pid_t launcher) { return shm_name::segment_prefix(launcher); }

int remove_worker_segments() noexcept {
  std::string prefix;
  try {
    prefix = worker_segment_prefix(getpid());
  } catch (...) {
    return 0;
  }
  return remove_segments([&](const std::string& name) { return name.rfind(prefix, 0) == 0; });
}

int remove_segments_of_gone_launchers() noexcept {
  std::string ns;
  try {
    ns = "-" + std::to_string(shm_name::pid_namespace_id()) + "-";
  } catch (...) {
    return 0;
  }
  const std::string head = "accel-shm-";
  return remove_segments([&](const std::string& name) {
    if (name.rfind(head, 0) != 0) return false;
    size_t end = head.size();
    while (end < name.size() && name[end] >= '0' && name[end] <= '9') ++end;
    if (end == head.size() || end - head.size() > 9 || name.compare(end, ns.size(), ns) != 0) return false;
    const pid_t launcher = static_cast<pid_t>(std::stol(name.substr(head.size(), end - head.size())));
    // Only a pid that no longer exists: EPERM (another user's process) or success means alive.
    return launcher > 0 && kill(launcher, 0) != 0 && errno == ESRCH;
  });
}

}  // namespace accel::launch
