// The files of the nvme offload stores (optimizer states, parameter shards): the per-process
// folder they live in, and whole-range reads and writes that resume after short transfers.
// Errors name the file and the job key whose directory holds it (free space and permissions are
// what usually fails).
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <string>

namespace accel::engine {

// <parent>/<prefix>_rank<r>_pid<p>. Created by the constructor; removed with its files by the
// destructor, because the files are scratch (a checkpoint holds the real state) and a crashed
// run's leftovers are told apart by the pid.
class OffloadScratchDir {
 public:
  // `key` is the job key naming `parent` (deepspeed.offload_optimizer_nvme_path, ...).
  OffloadScratchDir(const std::string& parent, const std::string& prefix, int rank, std::string key);
  ~OffloadScratchDir();
  OffloadScratchDir(const OffloadScratchDir&) = delete;
  OffloadScratchDir& operator=(const OffloadScratchDir&) = delete;

  const std::string& path() const { return path_; }
  const std::string& key() const { return key_; }

 private:
  std::string key_;
  std::string path_;
};

// Creates (or empties) `path` in `dir` for reading and writing, sized to `bytes` (zeros); returns
// its descriptor.
int create_offload_file(const OffloadScratchDir& dir, const std::string& path, size_t bytes);
// Exactly `bytes` at byte `at` of the file, or RunError naming it.
void read_offload_file(const OffloadScratchDir& dir, int fd, const std::string& path, void* dst, size_t bytes, off_t at);
void write_offload_file(const OffloadScratchDir& dir, int fd, const std::string& path, const void* src, size_t bytes,
                        off_t at);

}  // namespace accel::engine
