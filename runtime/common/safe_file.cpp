// Opening files accel writes without following links; see safe_file.hpp.
#include "runtime/common/safe_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "runtime/common/errors.hpp"

namespace accel::files {
namespace {

std::string quoted(const std::string& path) {
  std::string q = "'";
  for (char c : path) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// Throws for a failed open of `path`: UsageError for a link, RunError for anything else.
[[noreturn]] void throw_open_error(const std::string& path, int err) {
  if (is_symlink(path)) throw UsageError(link_refusal(path));
  throw RunError(open_error(path, err));
}

// The fd, checked to be a regular file and left blocking; closes it and throws otherwise.
int checked_regular(int fd, const std::string& path) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw RunError("cannot inspect " + path + ": " + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw UsageError(path + " is not a regular file: accel writes only regular files there (fix: remove it: rm " +
                     quoted(path) + ")");
  }
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  return fd;
}

}  // namespace

int open_nofollow(const std::string& path, int flags, mode_t mode) noexcept {
  for (;;) {
    const int fd = ::open(path.c_str(), flags | O_NOFOLLOW | O_CLOEXEC, mode);
    if (fd >= 0 || errno != EINTR) return fd;
  }
}

bool is_symlink(const std::string& path) noexcept {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode);
}

std::string link_refusal(const std::string& path) {
  return path + " is a symbolic link: accel never follows a link where it writes a file, so nothing was written "
                "(fix: remove the link: rm " + quoted(path) + ")";
}

std::string open_error(const std::string& path, int err) {
  if ((err == ELOOP || err == EEXIST) && is_symlink(path)) return link_refusal(path);
  return "cannot open " + path + ": " + std::strerror(err);  // reads use it too
}

void refuse_link(const std::string& path) {
  if (is_symlink(path)) throw UsageError(link_refusal(path));
}

int open_for_write(const std::string& path, WriteMode how, mode_t mode) {
  // O_NONBLOCK: a FIFO planted here fails the open (or the check below) instead of blocking it.
  // O_APPEND in both modes: the writers here write in order, and a file shared by several
  // writers (a rank log) takes each write whole at its end. Emptied only once known to be a
  // regular file.
  const int fd = open_nofollow(path, O_WRONLY | O_CREAT | O_APPEND | O_NONBLOCK, mode);
  if (fd < 0) throw_open_error(path, errno);
  checked_regular(fd, path);
  if (how == WriteMode::truncate && ::ftruncate(fd, 0) != 0) {
    const int err = errno;
    ::close(fd);
    throw RunError("cannot empty " + path + ": " + std::strerror(err));
  }
  return fd;
}

std::FILE* fopen_for_write(const std::string& path, WriteMode how, mode_t mode) {
  const int fd = open_for_write(path, how, mode);
  std::FILE* f = ::fdopen(fd, how == WriteMode::append ? "a" : "w");
  if (!f) {
    const int err = errno;
    ::close(fd);
    throw RunError("cannot open " + path + " for writing: " + std::strerror(err));
  }
  return f;
}

int create_fresh(const std::string& path, mode_t mode) {
  ::unlink(path.c_str());  // a stale file or a planted link: removed, never followed (ENOENT is the usual case)
  const int fd = open_nofollow(path, O_WRONLY | O_CREAT | O_EXCL, mode);
  if (fd < 0) throw_open_error(path, errno);
  return fd;
}

void write_all(int fd, std::string_view text, const std::string& path) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw RunError("cannot write " + path + ": " + std::strerror(n < 0 ? errno : EIO));
    done += size_t(n);
  }
}

void write_file_replacing(const std::string& path, std::string_view text, bool sync) {
  refuse_link(path);
  // The process's own name, and the call's within it (two threads never share a staged file).
  static std::atomic<unsigned> calls{0};
  const unsigned call = calls.fetch_add(1);
  const std::string staged =
      path + ".tmp." + std::to_string(::getpid()) + (call == 0 ? std::string() : "." + std::to_string(call));
  const int fd = create_fresh(staged);
  std::string error;
  try {
    write_all(fd, text, staged);
  } catch (const RunError& e) {
    error = e.what();
  }
  if (error.empty() && sync && ::fsync(fd) != 0 && errno != EINVAL)
    error = "cannot sync " + staged + ": " + std::strerror(errno);
  if (::close(fd) != 0 && error.empty()) error = "cannot close " + staged + ": " + std::strerror(errno);
  if (error.empty() && ::rename(staged.c_str(), path.c_str()) != 0)
    error = "cannot replace " + path + ": " + std::strerror(errno);
  if (error.empty()) return;
  ::unlink(staged.c_str());
  throw RunError(error);
}

}  // namespace accel::files
