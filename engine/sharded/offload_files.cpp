// Offload files (see offload_files.hpp).
#include "engine/sharded/offload_files.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "runtime/common/errors.hpp"
#include "runtime/common/safe_file.hpp"

namespace accel::engine {
namespace {

[[noreturn]] void fail(const OffloadScratchDir& dir, const std::string& what, const std::string& path) {
  throw RunError("nvme offload: cannot " + what + " " + path + ": " + std::strerror(errno) + " (check " + dir.key() +
                 ": free space and permissions)");
}

}  // namespace

OffloadScratchDir::OffloadScratchDir(const std::string& parent, const std::string& prefix, int rank, std::string key)
    : key_(std::move(key)),
      path_((std::filesystem::path(parent) /
             (prefix + "_rank" + std::to_string(rank) + "_pid" + std::to_string(::getpid())))
                .string()) {
  std::error_code ec;
  std::filesystem::create_directories(path_, ec);
  if (ec) throw RunError("nvme offload: cannot create " + path_ + ": " + ec.message() + " (check " + key_ + ")");
}

OffloadScratchDir::~OffloadScratchDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

int create_offload_file(const OffloadScratchDir& dir, const std::string& path, size_t bytes) {
  // Never through a link planted in the scratch directory (runtime/common/safe_file.hpp).
  int fd = files::open_nofollow(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
  if (fd < 0 && files::is_symlink(path)) throw UsageError("nvme offload: " + files::link_refusal(path));
  if (fd < 0) fail(dir, "create", path);
  if (::ftruncate(fd, off_t(bytes)) != 0) fail(dir, "size", path);
  return fd;
}

void read_offload_file(const OffloadScratchDir& dir, int fd, const std::string& path, void* dst, size_t bytes,
                       off_t at) {
  char* p = static_cast<char*>(dst);
  while (bytes > 0) {
    ssize_t n = ::pread(fd, p, bytes, at);
    if (n <= 0) fail(dir, "read", path);
    p += n;
    at += n;
    bytes -= size_t(n);
  }
}

void write_offload_file(const OffloadScratchDir& dir, int fd, const std::string& path, const void* src, size_t bytes,
                        off_t at) {
  const char* p = static_cast<const char*>(src);
  while (bytes > 0) {
    ssize_t n = ::pwrite(fd, p, bytes, at);
    if (n <= 0) fail(dir, "write", path);
    p += n;
    at += n;
    bytes -= size_t(n);
  }
}

}  // namespace accel::engine
