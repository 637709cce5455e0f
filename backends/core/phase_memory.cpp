#include "backends/core/phase_memory.hpp"

#include <malloc.h>

#include "backends/core/unit_block_allocator.hpp"

namespace accel::backends {

void end_memory_phase(bool trim_heap) {
  UnitBlockAllocator::instance().trim();
  if (trim_heap) malloc_trim(0);
}

}  // namespace accel::backends
