// MappedFile: see mapped_file.hpp.
#include "trainer/data/mapped_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "trainer/data/data_error.hpp"

namespace accel::train {

namespace {
[[noreturn]] void fail(const std::string& path, const char* what, int err) {
  throw DataError("data file '" + path + "': cannot " + what + ": " + std::strerror(err));
}
}  // namespace

MappedFile::MappedFile(const std::string& path) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(path, "open it", errno);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    fail(path, "stat it", err);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw DataError("data file '" + path + "': not a regular file");
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      fail(path, "map it into memory", err);
    }
    bytes_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);  // the mapping keeps the file open
}

MappedFile::~MappedFile() {
  if (bytes_) ::munmap(const_cast<uint8_t*>(bytes_), size_);
}

}  // namespace accel::train
