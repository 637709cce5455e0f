// The end of one of the engine's memory phases (construction, a micro-step, the optimizer step, a
// checkpoint save or load): what the phase freed goes back to the system before the next begins.
// Unit blocks kept for reuse are unmapped (unit_block_allocator.hpp), and malloc's free pages are
// returned (malloc_trim): libtorch's own temporaries (autograd's weight gradients, optimizer
// math, activations) leave freed chunks in the arenas that would otherwise stay resident under the
// next phase's buffers, e.g. under the nvme staging buffers of the optimizer step (docs/design/0008).
// Cost: a walk over the arenas' free chunks, and refaulting the pages the next phase reuses.
#pragma once

namespace accel::backends {

void end_memory_phase();

}  // namespace accel::backends
