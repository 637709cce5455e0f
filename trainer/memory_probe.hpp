// Resident memory at named phases of a run (model built, engine built, first step, steady state),
// for finding where the peak resident size is set: the peak is a high-water mark, so the phase at
// which it last rose is the one to look at. Logged at debug level (ACCEL_LOG_LEVEL=debug), every
// rank. Reading costs a /proc read and a heap walk: call it at phase boundaries, not per unit.
#pragma once

#include <cstdint>
#include <string>

namespace accel::train {

struct MemoryProbe {
  int64_t rss_bytes = 0;        // resident now (VmRSS)
  int64_t peak_rss_bytes = 0;   // high-water mark so far (VmHWM; getrusage's ru_maxrss)
  int64_t heap_in_use = 0;      // malloc'd and not freed, outside mmapped chunks
  int64_t heap_free = 0;        // freed but kept by malloc in its arenas (resident until malloc_trim)
  int64_t heap_mmapped = 0;     // large chunks malloc mapped directly (returned to the OS on free)
  int64_t unit_blocks = 0;      // the sharding engine's unit buffers, live and kept (outside malloc)
};

MemoryProbe probe_memory();

// Restarts the resident high-water mark (VmHWM) at the resident size now (Linux: "5" into
// /proc/self/clear_refs), so a later probe_memory().peak_rss_bytes is the peak of what ran since:
// the peak of one phase (the weights export) rather than of the whole run. False where the
// kernel refuses it; the mark then keeps counting from the start.
bool restart_peak_rss();

// "[rank r/w] memory after <phase>: rss ..., peak ...; heap in use ..., free ..., mmapped ...; unit blocks ..."
std::string describe_memory(int rank, int world, const std::string& phase, const MemoryProbe& m);

// Logs describe_memory at debug level; nothing is read unless debug logging is on.
void log_memory(int rank, int world, const std::string& phase);

}  // namespace accel::train
