// One launch per output directory and machine: a second `accel launch` (or test, or bench) of the
// same machine_rank into an output_dir that a running launch holds would overwrite its resolved
// job file, its rank logs and its checkpoints, and its workers could read the other job's file.
// The lock is an flock on <output_dir>/.accel-launch[.machine<k>].lock, held for the launch's
// lifetime and released by the kernel when the launcher exits, however it exits, so a crashed
// launch never leaves a stale lock. The launchers of one job on loopback (distinct machine ranks)
// share the directory, as they always could.
#pragma once

#include <string>

namespace accel::launch {

class OutputDirLock {
 public:
  // Takes the lock or throws UsageError naming the holder's pid and the fix.
  OutputDirLock(const std::string& output_dir, int machine_rank);
  ~OutputDirLock();
  OutputDirLock(const OutputDirLock&) = delete;
  OutputDirLock& operator=(const OutputDirLock&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
};

}  // namespace accel::launch
