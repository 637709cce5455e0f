// The engine's unit-buffer allocator: blocks are their own mappings, a released block serves the
// next request of its size until trim(), storage from it can be freed and regrown in place (what
// UnitParamBuffers does at stage 3), and blocks may be released on other threads.
#include "tests/support/catch_with_torch.hpp"

#include <ATen/native/Resize.h>

#include <thread>

#include "engine/sharded/unit_block_allocator.hpp"

using accel::engine::UnitBlockAllocator;
using accel::engine::unit_empty;
using accel::engine::unit_zeros;

TEST_CASE("unit blocks: a released block is reused by its size until trim", "[memory]") {
  auto& blocks = UnitBlockAllocator::instance();
  blocks.trim();
  const int64_t base = blocks.mapped_bytes();
  const void* first = nullptr;
  {
    at::Tensor a = unit_zeros(1 << 20, at::kFloat);  // 4 MiB
    CHECK(at::equal(a, at::zeros({1 << 20})));
    first = a.data_ptr();
    CHECK(blocks.mapped_bytes() == base + (int64_t(4) << 20));
  }
  CHECK(blocks.kept_bytes() == int64_t(4) << 20);  // released, kept for the next unit
  {
    at::Tensor b = unit_zeros(1 << 20, at::kFloat);
    CHECK(b.data_ptr() == first);  // the same pages
    CHECK(at::equal(b, at::zeros({1 << 20})));
    at::Tensor c = unit_empty(1 << 19, at::kBFloat16);  // another size maps a new block
    CHECK(c.data_ptr() != first);
    CHECK(blocks.kept_bytes() == 0);
  }
  blocks.trim();
  CHECK(blocks.kept_bytes() == 0);
  CHECK(blocks.mapped_bytes() == base);
}

TEST_CASE("unit blocks: storage frees and regrows through the allocator, views stay valid", "[memory]") {
  auto& blocks = UnitBlockAllocator::instance();
  blocks.trim();
  const int64_t base = blocks.mapped_bytes();
  at::Tensor full = unit_empty(3000, at::kFloat);
  at::Tensor view = full.narrow(0, 1000, 1000).view({10, 100});
  at::native::resize_bytes_cpu(full.storage().unsafeGetStorageImpl(), 0);
  blocks.trim();
  CHECK(blocks.mapped_bytes() == base);
  at::native::resize_bytes_cpu(full.storage().unsafeGetStorageImpl(), 3000 * 4);
  full.fill_(2.0f);
  CHECK(at::equal(view, at::full({10, 100}, 2.0f)));
  CHECK(blocks.mapped_bytes() > base);
}

TEST_CASE("unit blocks: released on another thread, zero-sized requests", "[memory]") {
  auto& blocks = UnitBlockAllocator::instance();
  blocks.trim();
  const int64_t base = blocks.mapped_bytes();
  at::Tensor t = unit_zeros(4096, at::kFloat);
  std::thread([moved = std::move(t)]() mutable { moved = at::Tensor(); }).join();
  CHECK(blocks.kept_bytes() == 4096 * 4);
  CHECK(unit_empty(0, at::kFloat).numel() == 0);
  blocks.trim();
  CHECK(blocks.mapped_bytes() == base);
}

ACCEL_ASSERT_CHECK_IS_CATCH();
