// The shared-memory segments of launchers' workers (runtime/comm/shm_collectives.hpp): rank 0 names
// its segment /accel-shm-<launcher pid>-<pid namespace>-<random> (runtime/common/shm_segment_name.hpp)
// and unlinks it once every rank attached, but a rank killed in the milliseconds between creating and
// unlinking it would leave its pages in /dev/shm for good. The launcher removes what its workers left
// whenever a worker group ends; a launcher that was itself SIGKILLed (its workers die with it, so
// no process of that job is left to act) has its segments removed by the next launch on the host.
// Invariants: only this user's regular files of this pid namespace are removed, of this launcher or of
// a launcher pid that no longer exists; nothing is followed (unlinkat on the name).
#pragma once

#include <string>
#include <sys/types.h>

namespace accel::launch {

// "accel-shm-<pid>-<pid namespace>-": the name prefix (without the leading '/') of the segments of
// the workers of the launcher with process id `launcher`.
std::string worker_segment_prefix(pid_t launcher);

// Removes /dev/shm/<worker_segment_prefix(getpid())>* of this user. Returns how many it removed.
int remove_worker_segments() noexcept;

// Removes this user's segments of this pid namespace whose launcher no longer exists (kill(pid, 0)
// says ESRCH): what a SIGKILLed launcher's workers left. Returns how many it removed.
int remove_segments_of_gone_launchers() noexcept;

}  // namespace accel::launch
