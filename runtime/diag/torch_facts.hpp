// libtorch facts for `accel env`: version, CUDA/NCCL support, GPUs and CPU threading.
// torch_facts.cpp is the only diag file that includes torch headers; this header includes none,
// so callers compile without them. Collection never throws.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace accel::diag {

struct GpuInfo {
  int index = 0;
  std::string name;                      // e.g. "NVIDIA H100 80GB HBM3"
  std::uint64_t total_memory_bytes = 0;
  std::string compute_capability;        // e.g. "9.0"
};

struct TorchFacts {
  std::string version;              // libtorch headers accel was compiled against, e.g. "1.13.0"
  std::string runtime_version;      // TORCH_VERSION the loaded library reports, "" if unknown
  std::string library_path;         // the libtorch_cpu this process loaded, "" if unknown
  bool built_with_cuda = false;     // the libtorch build has USE_CUDA=ON
  bool cuda_library_loaded = false; // libtorch_cuda is loaded (built_with_cuda but not loaded
                                    // usually means the link dropped it: -Wl,--no-as-needed)
  bool cuda_available = false;      // torch::cuda::is_available(): a usable GPU and driver
  int cuda_device_count = 0;
  std::optional<std::string> cuda_runtime_version;  // CUDA runtime libtorch was built with, "12.1"
  std::optional<std::string> cudnn_version;         // e.g. "8.9.2"
  std::optional<std::string> nccl_version;          // NCCL loaded in this process, e.g. "2.18.1"
  std::vector<GpuInfo> gpus;
  int intra_op_threads = 0;         // at::get_num_threads()
  int inter_op_threads = 0;         // at::get_num_interop_threads()
  std::string blas_info;            // BLAS_INFO libtorch was configured with ("mkl", "generic", ...)
  std::string lapack_info;          // LAPACK_INFO likewise
  std::string mkl;                  // at::get_mkl_version(), "MKL not found" without MKL
  std::string openmp;               // at::get_openmp_version(), or "" without OpenMP
};

// Also guarantees libtorch (and with it the BLAS it links) is loaded: call it before detect_blas().
TorchFacts collect_torch_facts();

}  // namespace accel::diag
