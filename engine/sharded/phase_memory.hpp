// The end of one of the engine's memory phases (construction, a micro-step, the optimizer step, a
// checkpoint save or load): what the phase freed goes back to the system before the next begins.
// Unit blocks kept for reuse are unmapped (unit_block_allocator.hpp), and malloc's free pages are
// returned (malloc_trim): libtorch's own temporaries (autograd's weight gradients, optimizer
// math, activations) leave freed chunks in the arenas that would otherwise stay resident under the
// next phase's buffers, e.g. under the nvme staging buffers of the optimizer step (docs/design/0008).
// Cost: a walk over the arenas' free chunks, and refaulting the pages the next phase reuses.
// That cost recurs at every micro-step and step (measured: 9 ms of a 37 ms step for a 2 x 128 GPT,
// 40 ms of 300 for 6 x 384, at zero_stage 1-3, world 2), so the engine ends those phases with
// trim_heap only where the staging buffers of an offload would come on top. Otherwise a per-step
// phase returns nothing: the unit blocks kept for reuse (at most UnitBlockAllocator's kMaxKept)
// serve the next micro-step. Unmapping them at every phase made each step fault and zero its
// gradient and gather buffers again: 4-15% of a zero-2 step and 2-9% of a FULL_SHARD step
// (docs/design/0008). Construction and checkpoints always trim.
#pragma once

namespace accel::engine {

void end_memory_phase(bool trim_heap = true);

// malloc's free pages only, between the units of a construction: each unit's initialization (the
// spec's draws, the conversions) frees chunks that the next unit's allocations do not fit, so
// without it they pile up resident until the construction's end (about 0.3 GB for a 12 x 1536 GPT
// at world 2). The unit blocks kept for reuse stay: the next unit's buffers take them.
void trim_malloc_heap();

}  // namespace accel::engine
