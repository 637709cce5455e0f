// One launcher per rank and output directory: a second `accel launch` (or test, or bench) that would
// run a rank that a running launch of this directory runs would overwrite that rank's log and
// checkpoint shard, and its resolved job file. Each launcher holds an flock on
// <output_dir>/.accel-launch/rank<r>.lock for every rank r it starts: a plain launch of machine k
// the ranks of machine k, a scheduler's task per process (mpirun -np N, srun -n N) its one rank.
// The tasks of one job never share a rank, so they never refuse each other; two jobs in one
// directory always do, at rank 0 at the latest. The kernel drops the locks when the launcher exits,
// however it exits, so a crashed launch never leaves a stale lock. Lock files are opened without
// following links (a link planted in output_dir is refused, never truncated through).
#pragma once

#include <string>
#include <vector>

namespace accel::launch {

class OutputDirLock {
 public:
  // Locks ranks [first_rank, first_rank + num_ranks) or throws UsageError naming the rank, the
  // holder's pid and the fix.
  OutputDirLock(const std::string& output_dir, int first_rank, int num_ranks);
  ~OutputDirLock();
  OutputDirLock(const OutputDirLock&) = delete;
  OutputDirLock& operator=(const OutputDirLock&) = delete;

  // The lock directory, <output_dir>/.accel-launch.
  const std::string& directory() const { return directory_; }

 private:
  void release();

  std::string directory_;
  std::vector<int> fds_;
};

}  // namespace accel::launch
