#include "runtime/launch/output_dir_lock.hpp"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/common/errors.hpp"
#include "runtime/common/safe_file.hpp"

namespace fs = std::filesystem;

namespace accel::launch {
namespace {

std::string read_holder(int fd) {
  char buf[64] = {};
  ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  std::string text = n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text.empty() ? "unknown" : text;
}

// The lock directory, opened without following a link in its place (O_NOFOLLOW on the last
// component; output_dir itself is the user's path).
int open_lock_directory(const std::string& path) {
  if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST)
    throw RunError("cannot create " + path + ": " + std::strerror(errno));
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0 && files::is_symlink(path)) throw UsageError(files::link_refusal(path));  // exit 2, naming it
  if (fd < 0)
    throw RunError("cannot open " + path + ": " + std::strerror(errno) +
                   (errno == ELOOP || errno == ENOTDIR ? " (it must be a directory, not a link or a file)" : ""));
  return fd;
}

}  // namespace

OutputDirLock::OutputDirLock(const std::string& output_dir, int first_rank, int num_ranks) {
  fs::path dir = fs::absolute(output_dir);
  fs::create_directories(dir);
  directory_ = (dir / ".accel-launch").string();
  const int dir_fd = open_lock_directory(directory_);
  const std::string pid = std::to_string(::getpid()) + "\n";
  try {
    for (int rank = first_rank; rank < first_rank + num_ranks; ++rank) {
      const std::string name = "rank" + std::to_string(rank) + ".lock";
      const std::string path = directory_ + "/" + name;
      // O_CLOEXEC: workers do not inherit it, so the lock lives exactly as long as this launcher.
      int fd = ::openat(dir_fd, name.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
      if (fd < 0 && files::is_symlink(path)) throw UsageError(files::link_refusal(path));  // exit 2, naming it
      if (fd < 0) throw RunError("cannot open " + path + ": " + std::strerror(errno));
      if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
        const int err = errno;
        std::string holder = read_holder(fd);
        ::close(fd);
        if (err != EWOULDBLOCK) throw RunError("cannot lock " + path + ": " + std::strerror(err));
        throw UsageError("training.output_dir: " + dir.string() + " is in use by another accel launch (pid " +
                         holder + ", which runs rank " + std::to_string(rank) +
                         "); two runs in one directory overwrite each other's job file, rank logs and checkpoints\n"
                         "  fix: give this run its own directory (--set training.output_dir=PATH), or wait for "
                         "the other run to end");
      }
      fds_.push_back(fd);
      if (::ftruncate(fd, 0) == 0) {
        ssize_t ignored = ::pwrite(fd, pid.data(), pid.size(), 0);
        (void)ignored;  // the pid only improves the message a second launch prints
      }
    }
  } catch (...) {
    ::close(dir_fd);
    release();
    throw;
  }
  ::close(dir_fd);
}

void OutputDirLock::release() {
  for (int fd : fds_) ::close(fd);  // closing releases the flock
  fds_.clear();
}

OutputDirLock::~OutputDirLock() { release(); }

}  // namespace accel::launch
