// The CUDA GPU count through the driver API, loaded at run time (see the header).
#include "runtime/launch/gpu_probe.hpp"

#include <dlfcn.h>

#include <string>

namespace accel::launch {

config::GpuCount visible_cuda_gpus() {
  // The driver API's C signatures (cuda.h): CUresult is an int enum, 0 success, 100 no device.
  using InitFn = int (*)(unsigned int);
  using CountFn = int (*)(int*);
  void* driver = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!driver) return {0, "libcuda.so.1 (the NVIDIA driver) is not installed"};
  auto init = reinterpret_cast<InitFn>(::dlsym(driver, "cuInit"));
  auto count = reinterpret_cast<CountFn>(::dlsym(driver, "cuDeviceGetCount"));
  // The library stays loaded: unloading a driver that was initialised is not supported.
  if (!init || !count) return {0, "libcuda.so.1 lacks cuInit/cuDeviceGetCount (a broken driver install?)"};
  if (int rc = init(0); rc != 0)
    return {0, rc == 100 ? "the NVIDIA driver reports no device (CUDA_VISIBLE_DEVICES may hide them)"
                         : "cuInit failed with CUresult " + std::to_string(rc)};
  int n = 0;
  if (int rc = count(&n); rc != 0) return {0, "cuDeviceGetCount failed with CUresult " + std::to_string(rc)};
  if (n == 0) return {0, "the NVIDIA driver reports no device"};
  return {n, ""};
}

}  // namespace accel::launch
