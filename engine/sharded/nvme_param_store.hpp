// Parameter shards on disk (DeepSpeed's offload_param_device: nvme, ZeRO-3). Each partitioned
// unit's shard in the compute dtype (this rank's piece of the unit's all-gather) lives in a file
// of this rank's scratch directory between uses; with fp32 compute and an nvme-offloaded optimizer
// it is read straight from the master at the start of the unit's optimizer file instead (the same
// values: no second file, and the optimizer's own write-back keeps it current). A gather stages
// the shard: stage() reads it into one of at most `buffer_count` host buffers, which goes back to
// the pool when the gather has completed (unstage()). After the optimizer step the engine writes
// each unit's new shard (its master in the compute dtype) to the unit's file with write().
// Invariants: at most buffer_count shards are staged at once (stage() refuses one more: the caller
// completes an earlier gather first); units read from a master file are never written here (the
// optimizer owns that file); the files are scratch, removed with the store.
#pragma once

#include <ATen/ATen.h>

#include <string>
#include <vector>

#include "engine/sharded/nvme_state_store.hpp"
#include "engine/sharded/offload_files.hpp"
#include "engine/sharded/unit_param_buffers.hpp"

namespace accel::engine {

class NvmeParamStore final : public ShardSource {
 public:
  // Creates `dir` and a per-rank, per-process subdirectory in it (apart from the optimizer's, so
  // the two may share `dir`). `dtype`: the compute dtype of the shards. `for_device`: the engine's;
  // for a GPU the staging buffers are page-locked, so the copy to the device is asynchronous (the
  // host allocator holds a freed buffer back until that copy is done).
  NvmeParamStore(const std::string& dir, int rank, int buffer_count, at::ScalarType dtype,
                 at::Device for_device = at::kCPU);
  ~NvmeParamStore() override;
  NvmeParamStore(const NvmeParamStore&) = delete;
  NvmeParamStore& operator=(const NvmeParamStore&) = delete;

  // A unit with a file of its own, holding `shard` (converted to the store's dtype); its index.
  int add_unit(const std::string& name, const at::Tensor& shard);
  // A unit whose shard is the first `numel` values of unit `state_unit` of `states` (its fp32
  // master); the store's dtype must be fp32. `states` must outlive the store.
  int add_master_view(const NvmeStateStore& states, int state_unit, int64_t numel);
  int size() const { return int(units_.size()); }
  bool has_own_file(int unit) const { return units_[size_t(unit)].fd >= 0; }
  int64_t numel(int unit) const { return units_[size_t(unit)].numel; }
  std::string file_path(int unit) const { return units_[size_t(unit)].path; }  // "" for master views

  void write(int unit, const at::Tensor& shard);  // a unit with its own file; converts to the dtype
  at::Tensor read(int unit) const;                // a new tensor (outside the pool)

  // ShardSource: the staging pool.
  int capacity() const override { return buffer_count_; }
  at::Tensor stage(int unit) override;
  void unstage(int unit) override;
  int staged() const { return staged_; }
  int peak_staged() const { return peak_staged_; }

  const std::string& directory() const { return dir_.path(); }
  at::ScalarType dtype() const { return dtype_; }
  int64_t bytes_on_disk() const;  // this store's own files (master views are the optimizer's)
  int64_t buffer_bytes() const;   // the pool's bound: min(buffer_count, units) x the largest shard

 private:
  struct UnitFile {
    std::string path;
    int64_t numel = 0;
    int fd = -1;                           // -1: a master view
    const NvmeStateStore* states = nullptr;
    int state_unit = -1;
  };
  void read_into(int unit, at::Tensor& dst) const;

  OffloadScratchDir dir_;  // first: built before, and removed after, the files
  int buffer_count_;
  at::ScalarType dtype_;
  at::Device for_device_;
  std::vector<UnitFile> units_;
  std::vector<char> is_staged_;
  int staged_ = 0, peak_staged_ = 0;
};

}  // namespace accel::engine
