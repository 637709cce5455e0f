#include "trainer/memory_probe.hpp"

#include <malloc.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "api/host.hpp"
#include "runtime/common/log.hpp"

namespace accel::train {
namespace {

// A "Vm...:   1234 kB" line of /proc/self/status, in bytes.
int64_t status_kib(const std::string& text, const std::string& key) {
  auto at = text.find("\n" + key + ":");
  if (at == std::string::npos) return 0;
  return std::stoll(text.substr(at + key.size() + 2)) * 1024;
}

std::string mib(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", double(bytes) / (1 << 20));
  return buf;
}

}  // namespace

MemoryProbe probe_memory() {
  MemoryProbe m;
  std::ifstream in("/proc/self/status");
  std::stringstream s;
  s << "\n" << in.rdbuf();
  m.rss_bytes = status_kib(s.str(), "VmRSS");
  m.peak_rss_bytes = status_kib(s.str(), "VmHWM");
  struct mallinfo2 info = mallinfo2();  // sums every arena
  m.heap_in_use = int64_t(info.uordblks);
  m.heap_free = int64_t(info.fordblks);
  m.heap_mmapped = int64_t(info.hblkhd);
  m.unit_blocks = api::EngineView::unit_block_bytes();
  return m;
}

std::string describe_memory(int rank, int world, const std::string& phase, const MemoryProbe& m) {
  return "[rank " + std::to_string(rank) + "/" + std::to_string(world) + "] memory after " + phase + ": rss " +
         mib(m.rss_bytes) + ", peak " + mib(m.peak_rss_bytes) + "; heap in use " + mib(m.heap_in_use) + ", free " +
         mib(m.heap_free) + ", mmapped " + mib(m.heap_mmapped) + "; unit blocks " + mib(m.unit_blocks);
}

void log_memory(int rank, int world, const std::string& phase) {
  if (!logging::debug_enabled()) return;
  logging::debug(describe_memory(rank, world, phase, probe_memory()));
}

bool restart_peak_rss() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
  out.flush();
  return bool(out);
}

}  // namespace accel::train
