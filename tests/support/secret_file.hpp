// A job secret file as SECURITY.md tells users to make one (32 bytes from the kernel's random
// source, mode 0600, created afresh), for tests that run several launchers of one job: such a job
// is refused without ACCEL_SECRET_FILE.
#pragma once

#include <fcntl.h>
#include <sys/random.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>

namespace accel::test {

// Writes the secret file at `path` (which must not exist) and returns its path.
inline std::string write_secret_file(const std::filesystem::path& path) {
  unsigned char key[32];
  if (getrandom(key, sizeof key, 0) != static_cast<ssize_t>(sizeof key))
    throw std::runtime_error(std::string("getrandom: ") + std::strerror(errno));
  const int fd = open(path.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
  if (fd < 0) throw std::runtime_error("cannot create " + path.string() + ": " + std::strerror(errno));
  const bool ok = write(fd, key, sizeof key) == static_cast<ssize_t>(sizeof key);
  close(fd);
  if (!ok) throw std::runtime_error("cannot write " + path.string());
  return path.string();
}

}  // namespace accel::test
