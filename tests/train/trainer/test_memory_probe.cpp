// The per-phase memory probe (ACCEL_LOG_LEVEL=debug): resident size now and at peak, and malloc's
// view of its heap, one line per phase.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>

#include "trainer/memory_probe.hpp"

using namespace accel;

TEST_CASE("memory probe: resident now and at peak, heap figures, one line per phase", "[memory]") {
  train::MemoryProbe before = train::probe_memory();
  CHECK(before.rss_bytes > 0);
  CHECK(before.peak_rss_bytes >= before.rss_bytes);
  // Touched pages are resident: the peak follows a 32 MiB block.
  const size_t bytes = size_t(32) << 20;
  auto* block = static_cast<volatile char*>(std::malloc(bytes));
  for (size_t i = 0; i < bytes; i += 4096) block[i] = 1;
  train::MemoryProbe during = train::probe_memory();
  std::free(const_cast<char*>(block));
  CHECK(during.peak_rss_bytes >= before.rss_bytes + (int64_t(30) << 20));
  CHECK(during.heap_in_use + during.heap_mmapped >= int64_t(bytes));
  std::string line = train::describe_memory(1, 2, "engine construction", during);
  CHECK(line.rfind("[rank 1/2] memory after engine construction: rss ", 0) == 0);
  CHECK(line.find(", peak ") != std::string::npos);
  CHECK(line.find("; heap in use ") != std::string::npos);
  CHECK(line.find("; unit blocks ") != std::string::npos);
}
