// Optimizer state on disk (DeepSpeed's offload_optimizer_device: nvme, ZeRO-Infinity). Each unit's
// fp32 state (master shard and moments, laid end to end) lives in one file of this rank's scratch
// directory; the optimizer streams the units through a bounded pool of `buffer_count` host
// buffers, reading ahead and writing behind on I/O threads while it updates the current unit.
// Invariants: at most buffer_count unit buffers exist at once, whatever the model size; a buffer
// is reused only after its write-back has completed; files are removed when the store is
// destroyed (they are scratch, not checkpoints: checkpoints are written separately).
#pragma once

#include <ATen/ATen.h>

#include <functional>
#include <string>
#include <vector>

#include "engine/sharded/offload_files.hpp"

namespace accel::engine {

class NvmeStateStore {
 public:
  // Creates `dir` (and a per-rank, per-process subdirectory in it). buffer_count >= 2.
  NvmeStateStore(const std::string& dir, int rank, int buffer_count);
  ~NvmeStateStore();
  NvmeStateStore(const NvmeStateStore&) = delete;
  NvmeStateStore& operator=(const NvmeStateStore&) = delete;

  // A unit of `floats` fp32 values, all zero until written; returns its index.
  int add_unit(const std::string& name, int64_t floats);
  int size() const { return int(units_.size()); }

  // Writes contiguous fp32 `values` at value `offset` of the unit (a part of it: no staging copy
  // of the whole unit is needed to set one of its tensors).
  void write(int unit, const at::Tensor& values, int64_t offset = 0);
  at::Tensor read(int unit);                       // a new tensor (outside the buffer pool)
  // Reads dst.numel() fp32 values from value `offset` of the unit into `dst` (contiguous fp32):
  // a part of a unit, e.g. its master for a parameter gather (nvme_param_store.hpp). Thread-safe.
  void read_range(int unit, int64_t offset, at::Tensor& dst) const;

  // Streams every unit, in order, through the buffer pool: `fn(unit, buffer)` sees the unit's
  // values and may change them; changes are written back when `write_back`.
  void for_each_unit(const std::function<void(int, at::Tensor&)>& fn, bool write_back);

  const std::string& directory() const { return dir_.path(); }
  int64_t bytes_on_disk() const;
  int64_t buffer_bytes() const;  // the pool's size: buffer_count x the largest unit

 private:
  struct UnitFile {
    std::string path;
    int64_t floats = 0;
    int fd = -1;
  };
  void read_into(int unit, at::Tensor& dst) const;
  void write_from(int unit, const at::Tensor& src, int64_t offset) const;

  OffloadScratchDir dir_;  // first: built before, and removed after, the files
  int buffer_count_;
  std::vector<UnitFile> units_;
};

}  // namespace accel::engine
