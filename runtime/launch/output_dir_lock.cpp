#include "runtime/launch/output_dir_lock.hpp"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include "runtime/common/errors.hpp"

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

}  // namespace

OutputDirLock::OutputDirLock(const std::string& output_dir, int machine_rank) {
  fs::path dir = fs::absolute(output_dir);
  fs::create_directories(dir);
  const std::string name =
      machine_rank == 0 ? ".accel-launch.lock" : ".accel-launch.machine" + std::to_string(machine_rank) + ".lock";
  path_ = (dir / name).string();
  // O_CLOEXEC: workers do not inherit it, so the lock lives exactly as long as this launcher.
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) throw RunError("cannot open " + path_ + ": " + std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    std::string holder = read_holder(fd_);
    ::close(fd_);
    fd_ = -1;
    if (err != EWOULDBLOCK) throw RunError("cannot lock " + path_ + ": " + std::strerror(err));
    throw UsageError("training.output_dir: " + dir.string() + " is in use by another accel launch (pid " + holder +
                     (machine_rank == 0 ? "" : ", machine_rank " + std::to_string(machine_rank)) +
                     "); two runs in one directory overwrite each other's job file, rank logs and checkpoints\n"
                     "  fix: give this run its own directory (--set training.output_dir=PATH), or wait for "
                     "the other run to end");
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd_, 0) == 0) {
    ssize_t ignored = ::pwrite(fd_, pid.data(), pid.size(), 0);
    (void)ignored;  // the pid only improves the message a second launch prints
  }
}

OutputDirLock::~OutputDirLock() {
  if (fd_ >= 0) ::close(fd_);  // closing releases the flock
}

}  // namespace accel::launch
