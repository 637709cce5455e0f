// YaFSDP's layer buffers: a fixed set of equal device buffers ("slots") that the sharding engine's
// transient unit buffers (a released unit's gathered parameters, a unit's flat gradient buffer)
// take turns in, instead of asking the device allocator for fresh memory at every gather and every
// backward. The slots are allocated during the first step, as the schedule first needs that many
// at the same time (bounded by the live-unit limit and the reduce bucket), then the pool is frozen
// and kept for the engine's lifetime: from the second step on no gather and no gradient buffer
// allocates, whatever else the step does with the caching allocator (activations, temporaries),
// so the two cannot fragment each other's blocks. Requests the slots cannot serve go to the
// backing allocator and are counted (fallbacks): one larger than a slot (the embedding, kept out
// of the layers), or one finding every slot taken after the freeze (a buffer whose release a
// communication thread had not finished when the next one was needed).
// Invariants: a slot is handed to one buffer at a time; it returns to the free list when that
// buffer's memory is freed (UnitParamBuffers::release after the gather's wait, a gradient buffer
// after its reduction's wait). Reuse is then ordered on a GPU because every use of a slot is
// queued on the compute stream before it is freed, and a collective writing into the next owner
// waits for the compute stream when it is issued (c10d's stream contract, docs/design/0018).
// Lifetime: the allocator object is never destroyed (model parameters are views of pooled buffers
// and may outlive the engine); retire() returns the free slots' memory at once and every other
// slot's when its buffer is freed.
#pragma once

#include <ATen/ATen.h>
#include <c10/core/Allocator.h>

#include <cstdint>
#include <mutex>
#include <vector>

namespace accel::engine {

class LayerBufferPool final : public c10::Allocator {
 public:
  // Slots of `slot_bytes` on `device`, from `backing` (which also serves larger requests).
  static LayerBufferPool* create(at::Device device, size_t slot_bytes, c10::Allocator* backing);

  c10::DataPtr allocate(size_t nbytes) override;
  void copy_data(void* dest, const void* src, std::size_t count) const override;

  // An uninitialised [numel] tensor whose storage (and every regrowth of it) comes from the pool.
  at::Tensor empty(int64_t numel, at::ScalarType dtype);
  // Gives the storage of `t` (any size, resizable) to the pool: its next regrowth takes a slot.
  void adopt(const at::Tensor& t);
  void freeze();  // no new slots from now on (the engine: after its first optimizer step)
  void retire();  // the engine is gone: free slots' memory now, in-use slots' when released

  size_t slot_bytes() const { return slot_bytes_; }
  int slots() const;          // allocated so far: the schedule's concurrency, fixed after a step
  int64_t fallbacks() const;  // requests served by the backing allocator instead of a slot

 private:
  LayerBufferPool(at::Device device, size_t slot_bytes, c10::Allocator* backing)
      : device_(device), slot_bytes_(slot_bytes), backing_(backing) {}
  struct Slot {
    LayerBufferPool* pool;
    c10::DataPtr memory;
    bool in_use = false;
  };
  static void give_back(void* slot);

  at::Device device_;
  size_t slot_bytes_;
  c10::Allocator* backing_;
  mutable std::mutex mu_;
  std::vector<Slot*> slots_;
  int64_t fallbacks_ = 0;
  bool frozen_ = false, retired_ = false;
};

}  // namespace accel::engine
