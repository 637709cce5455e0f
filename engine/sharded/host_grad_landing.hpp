// Gradient shards reduced on a GPU landing in host memory for an offloaded optimizer (DeepSpeed's
// offload_optimizer_device: cpu, FSDP's CPUOffload): each unit's reduced shard is copied into a
// page-locked staging buffer asynchronously, on the compute stream, as soon as its reduction is
// done, and added into the unit's fp32 host gradient only when the host needs the gradients
// (settle(): clipping, the optimizer step). A synchronous copy instead would stop the host at every
// unit of the backward until the device caught up, so nothing more would be queued behind it.
// Invariants: one staging buffer per unit, reused every micro-step; a unit landing again before
// settle() (gradient accumulation) first waits for its own previous copy (its event, long done)
// and adds it, so nothing is overwritten before it is taken. settle() waits for everything queued
// on the compute stream until then, the copies of the masters back to the device included, so
// after it the host may write the masters and read the gradients. On a CPU engine there is no
// stream: the copy is immediate and the deferral is the only difference.
// Lifetime: the device tensor a copy reads is freed by the caller right after land(); the caching
// allocator hands its block out again only to work queued after the copy on the same stream.
#pragma once

#include <ATen/ATen.h>
#include <c10/core/Event.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace accel::engine {

class HostGradLanding {
 public:
  explicit HostGradLanding(at::Device device) : device_(device) {}

  // Unit `unit` reduced to `reduced` (on the device): copy it towards `grad` (host, fp32) and add
  // it there at the next settle().
  void land(int unit, const at::Tensor& reduced, const at::Tensor& grad);
  // Waits for the device's queued work and adds every landed shard into its gradient.
  void settle();
  bool pending() const { return !pending_.empty(); }
  int64_t staging_bytes() const;

 private:
  struct Landing {
    int unit;
    at::Tensor grad;
  };
  void take(size_t i);  // adds pending_[i] into its gradient and drops it

  at::Device device_;
  std::vector<at::Tensor> staging_;                   // per unit, pinned, the reduced dtype
  std::vector<std::unique_ptr<c10::Event>> copied_;  // per unit, recorded after its copy
  std::vector<Landing> pending_;
};

}  // namespace accel::engine
