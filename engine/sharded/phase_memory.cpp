#include "engine/sharded/phase_memory.hpp"

#include <malloc.h>

#include "engine/sharded/unit_block_allocator.hpp"

namespace accel::engine {

void end_memory_phase(bool trim_heap) {
  // Without trim_heap the unit blocks kept for reuse stay mapped: the next micro-step asks for the
  // same sizes, and unmapping them made it fault and zero those pages again (design 0008, 2026-11-25).
  if (!trim_heap) return;
  UnitBlockAllocator::instance().trim();
  trim_malloc_heap();
}

void trim_malloc_heap() { malloc_trim(0); }

}  // namespace accel::engine
