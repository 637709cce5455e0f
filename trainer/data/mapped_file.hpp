// MappedFile: a whole file mapped read-only into memory (mmap), unmapped when the last owner goes.
// Invariant: bytes() stays valid and unchanged for the object's lifetime; an empty file maps to
// size() == 0 and a null pointer. Errors (open, stat, mmap) throw DataError naming the file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace accel::train {

class MappedFile {
 public:
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* bytes() const { return bytes_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const uint8_t* bytes_ = nullptr;
  size_t size_ = 0;
};

}  // namespace accel::train
