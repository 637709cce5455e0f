// Host memory for the sharding engine's unit-sized buffers (gathered parameters, gradient buffers,
// reduce outputs, shards, optimizer states, nvme staging), kept apart from the malloc heap.
// Why: glibc carves blocks below its (dynamic, up to 32 MiB) mmap threshold from its arenas; a
// freed unit buffer there gets split by small activations, the next unit's buffer no longer fits
// and the heap grows, so freed memory stays resident and sets the peak (docs/design/0008).
// Invariants: every block is its own anonymous mapping, unmapped when released; a released block
// (at most kMaxKept of them) is kept for reuse by a request of the same size until trim(). The
// engine trims at construction, at checkpoints, and at every phase of a step only under offload
// (phase_memory.hpp); otherwise the next unit's or the next step's buffer reuses the kept pages
// instead of faulting in new ones. Process-wide: tensors may outlive the engine (the model's
// parameters are views of its buffers). Thread-safe (buffers are freed on communication threads too).
#pragma once

#include <ATen/ATen.h>
#include <c10/core/Allocator.h>

#include <cstdint>
#include <mutex>
#include <vector>

namespace accel::engine {

class UnitBlockAllocator final : public c10::Allocator {
 public:
  static UnitBlockAllocator& instance();

  c10::DataPtr allocate(size_t nbytes) override;
  // Blocks are plain host memory: memcpy.
  void copy_data(void* dest, const void* src, std::size_t count) const override { default_copy_data(dest, src, count); }
  void trim();                  // unmaps the blocks kept for reuse
  int64_t mapped_bytes() const; // live and kept
  int64_t kept_bytes() const;

 private:
  struct Block {
    UnitBlockAllocator* owner;
    void* base;
    size_t bytes;  // the mapping's length (whole pages)
  };
  static void release(void* block);
  void give_back(Block* block);

  static constexpr size_t kMaxKept = 8;  // more released blocks than this are unmapped at once
  mutable std::mutex mu_;
  mutable std::vector<Block*> kept_;
  mutable int64_t mapped_ = 0;
};

// Uninitialised / zeroed tensors [numel] for a unit's buffers, resizable (UnitParamBuffers frees
// and regrows them through their storage's allocator). On the CPU the storage comes from the
// allocator above; on a GPU from the device's caching allocator, which already reuses blocks of
// freed buffers without returning them to the driver (and records their streams).
at::Tensor unit_empty(int64_t numel, at::ScalarType dtype, at::Device device = at::kCPU);
at::Tensor unit_zeros(int64_t numel, at::ScalarType dtype, at::Device device = at::kCPU);
// Host memory for states a GPU run keeps off the device (optimizer offload): page-locked, so the
// copies to and from the GPU run at full bandwidth and may be asynchronous. `for_device` CPU: a
// plain unit_empty (nothing to pin for).
at::Tensor host_empty(int64_t numel, at::ScalarType dtype, at::Device for_device);

}  // namespace accel::engine
