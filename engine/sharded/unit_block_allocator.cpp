#include "engine/sharded/unit_block_allocator.hpp"

#include <ATen/EmptyTensor.h>
#include <c10/util/Exception.h>
#include <sys/mman.h>
#include <unistd.h>

#include <optional>

namespace accel::engine {
namespace {

size_t whole_pages(size_t bytes) {
  static const size_t page = size_t(sysconf(_SC_PAGESIZE));
  return (bytes + page - 1) / page * page;
}

void no_delete(void*) {}

}  // namespace

UnitBlockAllocator& UnitBlockAllocator::instance() {
  static auto* allocator = new UnitBlockAllocator();  // never destroyed: blocks may be freed at exit
  return *allocator;
}

c10::DataPtr UnitBlockAllocator::allocate(size_t nbytes) {
  if (nbytes == 0) return {nullptr, nullptr, &no_delete, c10::Device(c10::DeviceType::CPU)};
  const size_t bytes = whole_pages(nbytes);
  Block* block = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = kept_.size(); i-- > 0;)  // the most recently released first: its pages are warm
      if (kept_[i]->bytes == bytes) {
        block = kept_[i];
        kept_.erase(kept_.begin() + std::ptrdiff_t(i));
        break;
      }
  }
  if (!block) {
    void* base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    TORCH_CHECK(base != MAP_FAILED, "accel: cannot map ", bytes, " bytes for a unit buffer (out of memory?)");
    block = new Block{const_cast<UnitBlockAllocator*>(this), base, bytes};
    std::lock_guard<std::mutex> lock(mu_);
    mapped_ += int64_t(bytes);
  }
  return {block->base, block, &UnitBlockAllocator::release, c10::Device(c10::DeviceType::CPU)};
}

void UnitBlockAllocator::release(void* block) {
  auto* b = static_cast<Block*>(block);
  b->owner->give_back(b);
}

void UnitBlockAllocator::give_back(Block* block) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (kept_.size() < kMaxKept) {
      kept_.push_back(block);
      return;
    }
    mapped_ -= int64_t(block->bytes);
  }
  ::munmap(block->base, block->bytes);
  delete block;
}

void UnitBlockAllocator::trim() {
  std::vector<Block*> blocks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    blocks.swap(kept_);
    for (Block* b : blocks) mapped_ -= int64_t(b->bytes);
  }
  for (Block* b : blocks) {
    ::munmap(b->base, b->bytes);
    delete b;
  }
}

int64_t UnitBlockAllocator::mapped_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return mapped_;
}

int64_t UnitBlockAllocator::kept_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t b = 0;
  for (const Block* block : kept_) b += int64_t(block->bytes);
  return b;
}

at::Tensor unit_empty(int64_t numel, at::ScalarType dtype, at::Device device) {
  if (!device.is_cpu()) return at::empty({numel}, at::TensorOptions(dtype).device(device));
  return at::detail::empty_generic({numel}, &UnitBlockAllocator::instance(), c10::DispatchKeySet(c10::DispatchKey::CPU),
                                   dtype, std::nullopt);
}

at::Tensor unit_zeros(int64_t numel, at::ScalarType dtype, at::Device device) {
  return unit_empty(numel, dtype, device).zero_();
}

at::Tensor host_empty(int64_t numel, at::ScalarType dtype, at::Device for_device) {
  if (for_device.is_cpu()) return unit_empty(numel, dtype);
  return at::empty({numel}, at::TensorOptions(dtype).pinned_memory(true));
}

}  // namespace accel::engine
