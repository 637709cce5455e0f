// A worker's scheduler state, read from /proc/<pid>/stat when the launcher stops the group, so the
// summary can say which rank was frozen (SIGSTOP, a debugger, a hung file system) while the others
// timed out waiting for it in a collective.
// Invariant: read-only and best effort: a process that is gone, or a system without /proc, reads as
// state 0, which describes as nothing remarkable.
#pragma once

#include <sys/types.h>

#include <string>

namespace accel::launch {

// The state letter of /proc/<pid>/stat ('R', 'S', 'D', 'T', 't', 'Z', ...), or 0 when unreadable.
char process_state(pid_t pid);

// Parses the state letter out of a /proc/<pid>/stat line (after the last ')' of the command name,
// which may itself hold spaces and parentheses); 0 when malformed.
char parse_stat_state(const std::string& stat_line);

// A phrase for the states that explain a hang ("stopped (state T: SIGSTOP or SIGTSTP)"), or "" for
// running, sleeping and unknown states.
std::string describe_hang_state(char state);

}  // namespace accel::launch
