// The shared-memory segments of this launcher's workers (runtime/comm/shm_collectives.hpp): rank 0
// names its segment /accel-shm-<launcher pid>-<random> and unlinks it once every rank attached,
// but a rank killed in the milliseconds between creating and unlinking it would leave its pages in
// /dev/shm for good. The launcher removes what its workers left whenever a worker group ends.
// Invariants: only names of this launcher's pid, owned by this user, regular files, are removed;
// nothing is followed (unlinkat on the name).
#pragma once

#include <string>
#include <sys/types.h>

namespace accel::launch {

// "accel-shm-<pid>-": the name prefix (without the leading '/') of the segments of the workers
// of the launcher with process id `launcher`.
std::string worker_segment_prefix(pid_t launcher);

// Removes /dev/shm/<worker_segment_prefix(getpid())>* of this user. Returns how many it removed.
int remove_worker_segments() noexcept;

}  // namespace accel::launch
