// Parameter shards in host memory (DeepSpeed's offload_param_device: cpu, FSDP's
// CPUOffload(offload_params=True), ZeRO-3 / FULL_SHARD). Each partitioned unit's shard in the
// compute dtype (this rank's piece of the unit's all-gather) lives in page-locked host memory
// between uses instead of on the device; a gather stages it: stage() returns the host shard, and
// UnitParamBuffers copies it to the device (asynchronously, on the compute stream) when the
// gather's buffer is elsewhere. After the optimizer step the engine writes each unit's new shard
// (its master in the compute dtype) back with write(). On a CPU run the shard is already where the
// gather reads it: nothing is copied, the store only holds it.
// Invariants: the store owns one host tensor per unit, never reallocated; stage() hands out the
// tensor itself (no staging buffer, so no bound on how many are staged).
#pragma once

#include <ATen/ATen.h>

#include <climits>
#include <string>
#include <vector>

#include "engine/sharded/unit_param_buffers.hpp"

namespace accel::engine {

class HostParamStore final : public ShardSource {
 public:
  // `dtype`: the compute dtype of the shards; `device`: the engine's (pinned memory for a GPU).
  HostParamStore(at::ScalarType dtype, at::Device device) : dtype_(dtype), device_(device) {}

  // A unit holding `shard` (copied, converted to the store's dtype); its index.
  int add_unit(const at::Tensor& shard);
  int size() const { return int(shards_.size()); }
  void write(int unit, const at::Tensor& shard) { shards_.at(size_t(unit)).copy_(shard); }
  int64_t host_bytes() const;

  // ShardSource.
  int capacity() const override { return INT_MAX; }
  at::Tensor stage(int unit) override { return shards_.at(size_t(unit)); }
  void unstage(int /*unit*/) override {}

 private:
  at::ScalarType dtype_;
  at::Device device_;
  std::vector<at::Tensor> shards_;
};

}  // namespace accel::engine
