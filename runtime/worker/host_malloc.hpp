// glibc malloc settings for a training worker (docs/design/0019-host-malloc.md).
//
// A training step allocates and frees the same large activations, gradients and communication
// buffers every step. glibc's defaults return them to the kernel between uses (blocks above the
// dynamic mmap threshold are unmapped; the top of the heap is trimmed), so every step faults the
// same pages in again and has the kernel zero them. A worker instead keeps freed memory for reuse:
// a fixed mmap threshold of 32 MiB (glibc's own ceiling for its dynamic one) and no automatic trim.
// The resident peak is the step's own peak either way; what changes is that the pages stay.
// accel's explicit malloc_trim calls (nvme offload, the run report) still return memory.
#pragma once

#include <cstddef>
#include <map>
#include <string>

namespace accel::worker {

struct HostMallocPlan {
  bool tune = false;
  std::size_t mmap_threshold = 0;  // bytes; blocks at or above it are mapped on their own
  bool trim_heap_top = true;       // false: the free top of the heap is never given back on its own
  std::string reason;              // why not, when tune is false
};

// What a worker should set, given its environment: nothing when the user chose glibc malloc
// settings of their own (GLIBC_TUNABLES naming a glibc.malloc tunable, or one of
// MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_, MALLOC_TOP_PAD_, MALLOC_MMAP_MAX_). Those are
// the switch back to glibc's defaults, or to any other choice.
HostMallocPlan plan_host_malloc(const std::map<std::string, std::string>& env);

// Applies the plan with mallopt; returns a line for the worker's log.
std::string apply_host_malloc(const HostMallocPlan& plan);

}  // namespace accel::worker
