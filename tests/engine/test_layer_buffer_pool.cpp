// LayerBufferPool on host memory (the same code a GPU runs, backed by the unit allocator instead of
// the caching allocator): slots are reused, grow until the pool is frozen, requests larger than a
// slot or beyond the frozen slots fall back and are counted, regrowth through an adopted storage
// takes a slot, and retire() returns the memory. The engine's use of it: test_nvme_param_offload.cpp
// ("layer buffers").
#include "tests/support/catch_with_torch.hpp"

#include "engine/sharded/layer_buffer_pool.hpp"
#include "engine/sharded/unit_block_allocator.hpp"

using accel::engine::LayerBufferPool;
using accel::engine::UnitBlockAllocator;

TEST_CASE("layer buffer pool: slots are reused, frozen, and larger requests fall back", "[layer_buffers]") {
  LayerBufferPool* pool = LayerBufferPool::create(at::kCPU, 64 * 4, &UnitBlockAllocator::instance());
  {
    at::Tensor a = pool->empty(64, at::kFloat), b = pool->empty(10, at::kFloat);
    CHECK(pool->slots() == 2);
    const void* a_memory = a.data_ptr();
    a = at::Tensor();  // back to the pool
    at::Tensor c = pool->empty(32, at::kFloat);
    CHECK(c.data_ptr() == a_memory);  // the free slot, not a new one
    CHECK(pool->slots() == 2);
    at::Tensor big = pool->empty(65, at::kFloat);  // larger than a slot
    CHECK(pool->fallbacks() == 1);
    pool->freeze();
    at::Tensor d = pool->empty(8, at::kFloat);  // every slot held, frozen: no third slot
    CHECK(pool->slots() == 2);
    CHECK(pool->fallbacks() == 2);
    c = at::Tensor();
    at::Tensor e = pool->empty(8, at::kFloat);
    CHECK(e.data_ptr() == a_memory);
    CHECK(pool->fallbacks() == 2);
  }
  // A storage given to the pool regrows into a slot (UnitParamBuffers' release and issue).
  at::Tensor unit = accel::engine::unit_empty(64, at::kFloat);
  c10::StorageImpl* storage = unit.storage().unsafeGetStorageImpl();
  storage->set_data_ptr_noswap(at::DataPtr(nullptr, at::kCPU));
  storage->set_nbytes(0);
  pool->adopt(unit);
  storage->set_data_ptr_noswap(storage->allocator()->allocate(64 * 4));
  storage->set_nbytes(64 * 4);
  unit.fill_(1.5);
  CHECK(unit.sum().item<double>() == 96.0);
  CHECK(pool->slots() == 2);  // an existing free slot
  pool->retire();
  unit = at::Tensor();  // its slot's memory goes back to the unit allocator now
  CHECK(pool->slots() == 2);
}
