#include "api/peak_memory.hpp"

#include <ATen/DeviceAccelerator.h>
#include <sys/resource.h>

namespace accel::api {

int64_t peak_memory_bytes(const c10::Device& device) {
  if (device.is_cpu()) {
    struct rusage usage {};
    getrusage(RUSAGE_SELF, &usage);
    return int64_t(usage.ru_maxrss) * 1024;  // Linux reports KiB
  }
  const auto stats = at::accelerator::getDeviceStats(device.index());
  return stats.allocated_bytes[size_t(c10::CachingAllocator::StatType::AGGREGATE)].peak;
}

}  // namespace accel::api
