// The peak memory a rank reports in its progress line and metrics: the high-water mark of memory
// allocated on its GPU through the caching allocator (torch.cuda.max_memory_allocated), or of the
// process's resident host memory on the CPU (getrusage's ru_maxrss).
#pragma once

#include <c10/core/Device.h>

#include <cstdint>

namespace accel::api {

int64_t peak_memory_bytes(const c10::Device& device);

}  // namespace accel::api
