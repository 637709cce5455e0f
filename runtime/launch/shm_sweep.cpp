// Removes the shared-memory segments a launcher's workers left; see shm_sweep.hpp.
#include "runtime/launch/shm_sweep.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace accel::launch {

std::string worker_segment_prefix(pid_t launcher) { return "accel-shm-" + std::to_string(launcher) + "-"; }

int remove_worker_segments() noexcept {
  const std::string prefix = worker_segment_prefix(getpid());
  DIR* dir = opendir("/dev/shm");
  if (!dir) return 0;
  int removed = 0;
  while (dirent* entry = readdir(dir)) {
    if (std::string(entry->d_name).rfind(prefix, 0) != 0) continue;
    struct stat st {};
    if (fstatat(dirfd(dir), entry->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (!S_ISREG(st.st_mode) || st.st_uid != geteuid()) continue;
    if (unlinkat(dirfd(dir), entry->d_name, 0) == 0) ++removed;
  }
  closedir(dir);
  return removed;
}

}  // namespace accel::launch
