// Files accel creates or truncates where others may plant a symbolic link (output_dir on a shared
// machine, a scratch or profile directory): one way to open them, so that no writer follows a
// link to another user's file (or to the user's own, on behalf of someone who can write the
// directory). Every open here adds O_NOFOLLOW and O_CLOEXEC; a file replaced as a whole is written
// beside under a fresh name (O_CREAT | O_EXCL, which never follows a link either) and renamed over.
// Invariants: a symbolic link at a path accel writes is an error (UsageError, so exit 2) that
// names the path and says the link is never followed, with a fix line; it is never followed,
// removed or replaced. Only the last component is checked: output_dir itself may be a link (the
// user's own choice). A FIFO or device at the path is refused too (opening it would block or write
// elsewhere). Other failures are RunErrors naming the path and the system's reason.
#pragma once

#include <sys/types.h>

#include <cstdio>
#include <string>
#include <string_view>

namespace accel::files {

// ::open(path, flags | O_NOFOLLOW | O_CLOEXEC, mode), retried on EINTR: the fd, or -1 with errno
// (ELOOP when `path` is a symbolic link). For callers that report failures their own way.
int open_nofollow(const std::string& path, int flags, mode_t mode = 0644) noexcept;

// Whether `path` itself (not what it points at) is a symbolic link.
bool is_symlink(const std::string& path) noexcept;

// "PATH is a symbolic link: accel never follows a link where it writes a file ... (fix: remove
// the link: rm 'PATH')": the refusal's one line.
std::string link_refusal(const std::string& path);

// The message for a failed open_nofollow of `path` with errno `err`: link_refusal() when the path
// is a link, else "cannot open PATH: <reason>".
std::string open_error(const std::string& path, int err);

// Throws UsageError(link_refusal(path)) when `path` is a symbolic link. For a file replaced by a
// rename, which would replace a planted link silently: the link is reported instead.
void refuse_link(const std::string& path);

enum class WriteMode { truncate, append };

// Opens `path` for writing (created with `mode` when missing; emptied or appended to), never
// through a link and only when it is a regular file. The fd, owned by the caller. Throws
// UsageError for a link, RunError for anything else.
int open_for_write(const std::string& path, WriteMode how, mode_t mode = 0644);

// The same as a stdio stream ("w" or "a" semantics), for writers that append with fwrite.
std::FILE* fopen_for_write(const std::string& path, WriteMode how, mode_t mode = 0644);

// Creates `path` anew for writing, for a file staged under a name of the caller's own (a
// temporary renamed into place): whatever is at `path` (a stale temporary, a planted link) is
// unlinked, never followed, then the file is created O_CREAT | O_EXCL. Throws as open_for_write.
int create_fresh(const std::string& path, mode_t mode = 0644);

// Writes all of `text` to `fd` (retried on EINTR and short writes); RunError naming `path` on failure.
void write_all(int fd, std::string_view text, const std::string& path);

// Replaces `path` with `text`: refuse_link(path), then a staged file beside it
// (PATH.tmp.<pid>, create_fresh) written, fsynced when `sync`, closed and renamed over `path`.
// A reader sees the old file or the new one, never half of one; the staged file is removed on failure.
void write_file_replacing(const std::string& path, std::string_view text, bool sync = false);

}  // namespace accel::files
