// Keeping freed host memory in a training worker (see host_malloc.hpp).
#include "runtime/worker/host_malloc.hpp"

#include <malloc.h>

namespace accel::worker {
namespace {

constexpr std::size_t kMiB = std::size_t(1) << 20;
// glibc refuses an mmap threshold above HEAP_MAX_SIZE / 2, 32 MiB on 64-bit Linux; it is also the
// ceiling its dynamic threshold would reach. Larger blocks stay mapped on their own.
constexpr std::size_t kMmapThreshold = 32 * kMiB;

bool user_chose_malloc_settings(const std::map<std::string, std::string>& env, std::string& which) {
  auto tunables = env.find("GLIBC_TUNABLES");
  if (tunables != env.end() && tunables->second.find("glibc.malloc.") != std::string::npos) {
    which = "GLIBC_TUNABLES sets glibc.malloc tunables";
    return true;
  }
  // glibc's older variables for the settings below (each turns its dynamic threshold off too).
  for (const char* name : {"MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_"}) {
    if (env.count(name)) {
      which = std::string(name) + " is set";
      return true;
    }
  }
  return false;
}

}  // namespace

HostMallocPlan plan_host_malloc(const std::map<std::string, std::string>& env) {
  HostMallocPlan plan;
  if (user_chose_malloc_settings(env, plan.reason)) return plan;
  plan.tune = true;
  plan.mmap_threshold = kMmapThreshold;
  plan.trim_heap_top = false;
  return plan;
}

std::string apply_host_malloc(const HostMallocPlan& plan) {
  if (!plan.tune) return "host malloc: glibc settings left as they are (" + plan.reason + ")";
  // Setting either one also turns off glibc's dynamic threshold, so both are set together.
  // A trim threshold of -1 turns automatic trimming off (mallopt(3)).
  const bool ok = mallopt(M_MMAP_THRESHOLD, int(plan.mmap_threshold)) == 1 &&
                  (plan.trim_heap_top || mallopt(M_TRIM_THRESHOLD, -1) == 1);
  if (!ok) return "host malloc: glibc refused the settings; its defaults stay";
  return "host malloc: freed memory kept for reuse (mmap threshold " + std::to_string(plan.mmap_threshold / kMiB) +
         " MiB, no automatic trim); set GLIBC_TUNABLES=glibc.malloc.* to choose otherwise";
}

}  // namespace accel::worker
