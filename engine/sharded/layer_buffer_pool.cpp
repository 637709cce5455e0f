#include "engine/sharded/layer_buffer_pool.hpp"

#include <ATen/EmptyTensor.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/StorageImpl.h>
#include <c10/util/Exception.h>

namespace accel::engine {

LayerBufferPool* LayerBufferPool::create(at::Device device, size_t slot_bytes, c10::Allocator* backing) {
  return new LayerBufferPool(device, slot_bytes, backing);  // never deleted: see the header
}

c10::DataPtr LayerBufferPool::allocate(size_t nbytes) {
  if (nbytes == 0) return backing_->allocate(0);
  Slot* slot = nullptr;
  bool grow = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (nbytes <= slot_bytes_)
      for (Slot* s : slots_)
        if (!s->in_use && s->memory) {
          slot = s;
          break;
        }
    if (slot) slot->in_use = true;
    grow = !slot && nbytes <= slot_bytes_ && !frozen_;
    if (!slot && !grow) ++fallbacks_;
  }
  c10::DeviceGuard guard(device_);  // the backing allocator serves the current device
  if (!slot && !grow) return backing_->allocate(nbytes);
  if (!slot) {
    c10::DataPtr memory = backing_->allocate(slot_bytes_);
    std::lock_guard<std::mutex> lock(mu_);
    slot = new Slot{this, std::move(memory), true};
    slots_.push_back(slot);
  }
  return {slot->memory.get(), slot, &LayerBufferPool::give_back, slot->memory.device()};
}

void LayerBufferPool::give_back(void* context) {
  auto* slot = static_cast<Slot*>(context);
  LayerBufferPool* pool = slot->pool;
  std::lock_guard<std::mutex> lock(pool->mu_);
  slot->in_use = false;
  if (pool->retired_) slot->memory.clear();
}

void LayerBufferPool::copy_data(void* dest, const void* src, std::size_t count) const {
  backing_->copy_data(dest, src, count);
}

at::Tensor LayerBufferPool::empty(int64_t numel, at::ScalarType dtype) {
  return at::detail::empty_generic({numel}, this, c10::DispatchKeySet(c10::computeDispatchKey(dtype, at::kStrided, device_)),
                                   dtype, std::nullopt);
}

void LayerBufferPool::adopt(const at::Tensor& t) { t.storage().unsafeGetStorageImpl()->set_allocator(this); }

void LayerBufferPool::freeze() {
  std::lock_guard<std::mutex> lock(mu_);
  frozen_ = true;
}

void LayerBufferPool::retire() {
  std::lock_guard<std::mutex> lock(mu_);
  retired_ = true;
  for (Slot* s : slots_)
    if (!s->in_use) s->memory.clear();
}

int LayerBufferPool::slots() const {
  std::lock_guard<std::mutex> lock(mu_);
  return int(slots_.size());
}

int64_t LayerBufferPool::fallbacks() const {
  std::lock_guard<std::mutex> lock(mu_);
  return fallbacks_;
}

}  // namespace accel::engine
