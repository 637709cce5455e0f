// How many CUDA GPUs this process can use, asked of the NVIDIA driver (libcuda.so.1, loaded with
// dlopen so the launcher neither links CUDA nor needs libtorch). The driver applies
// CUDA_VISIBLE_DEVICES. A machine without the driver or without a GPU has 0, with the reason.
// Safe before spawning workers: they are new executables (fork + exec), not forks using CUDA.
#pragma once

#include "runtime/config/placement.hpp"

namespace accel::launch {

config::GpuCount visible_cuda_gpus();

}  // namespace accel::launch
