// libtorch facts for `accel env`; the only diag file that includes torch headers.
// CUDA facts are queried at run time, so one source serves CPU and CUDA libtorch alike:
//  - the CUDA runtime and cuDNN versions come from ATen's CUDA hooks, which libtorch_cuda
//    registers when it is loaded (the CPU-only default hooks throw, which we catch);
//  - NCCL's version comes from ncclGetVersion, looked up in the loaded libraries (its C API is
//    stable across releases);
//  - GPU names and memory come from the CUDA driver API (libcuda.so.1, also a stable C ABI).
// No CUDA headers are needed, and Debian's CPU-only libtorch (which still ships ATen/cuda
// headers) cannot be mistaken for a CUDA build by a header check.
#include "runtime/diag/torch_facts.hpp"

#include <ATen/Parallel.h>
#include <ATen/Version.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <dlfcn.h>
#include <torch/cuda.h>
#if __has_include(<torch/version.h>)
#include <torch/version.h>
#endif

#include <exception>

namespace accel::diag {
namespace {

// A value from the "Build settings: KEY=value, KEY=value, ..." line of at::show_config().
std::string build_setting(const std::string& config, const std::string& key) {
  for (size_t at = config.find(key + "="); at != std::string::npos; at = config.find(key + "=", at + 1)) {
    if (at > 0 && config[at - 1] != ' ') continue;  // e.g. skip "USE_CUDA" inside "XUSE_CUDA"
    const size_t begin = at + key.size() + 1;
    const size_t end = config.find_first_of(",\n", begin);
    return config.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
  }
  return "";
}

std::string dotted(long major, long minor, long patch = -1) {
  std::string s = std::to_string(major) + "." + std::to_string(minor);
  return patch < 0 ? s : s + "." + std::to_string(patch);
}

// CUDART_VERSION encodes 12.1 as 12010.
std::string cuda_version_string(long v) { return dotted(v / 1000, (v % 1000) / 10); }

// cuDNN 8 encodes 8.9.2 as 8902; cuDNN 9 encodes 9.1.0 as 90100.
std::string cudnn_version_string(long v) {
  return v >= 10000 ? dotted(v / 10000, (v % 10000) / 100, v % 100) : dotted(v / 1000, (v % 1000) / 100, v % 100);
}

// NCCL >= 2.9 encodes 2.18.1 as 21801; older releases as 2708 for 2.7.8.
std::optional<std::string> nccl_version() {
  using get_version_fn = int (*)(int*);
  void* sym = dlsym(RTLD_DEFAULT, "ncclGetVersion");
  if (!sym) {
    if (void* handle = dlopen("libnccl.so.2", RTLD_LAZY | RTLD_NOLOAD)) {
      sym = dlsym(handle, "ncclGetVersion");
      dlclose(handle);
    }
  }
  int code = 0;
  if (!sym || reinterpret_cast<get_version_fn>(sym)(&code) != 0 || code <= 0) return std::nullopt;
  if (code >= 10000) return dotted(code / 10000, (code % 10000) / 100, code % 100);
  return dotted(code / 1000, (code % 1000) / 100, code % 100);
}

// GPU name, memory and compute capability through the CUDA driver API. Only called when
// torch::cuda::is_available(), so the driver is installed and already loaded by the runtime.
std::vector<GpuInfo> query_gpus(int count) {
  std::vector<GpuInfo> gpus;
  void* lib = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
  if (!lib) lib = dlopen("libcuda.so.1", RTLD_LAZY);
  if (!lib) return gpus;
  using init_fn = int (*)(unsigned);
  using get_fn = int (*)(int*, int);
  using name_fn = int (*)(char*, int, int);
  using mem_fn = int (*)(size_t*, int);
  using attr_fn = int (*)(int*, int, int);
  auto init = reinterpret_cast<init_fn>(dlsym(lib, "cuInit"));
  auto get = reinterpret_cast<get_fn>(dlsym(lib, "cuDeviceGet"));
  auto name = reinterpret_cast<name_fn>(dlsym(lib, "cuDeviceGetName"));
  auto mem = reinterpret_cast<mem_fn>(dlsym(lib, "cuDeviceTotalMem_v2"));
  auto attr = reinterpret_cast<attr_fn>(dlsym(lib, "cuDeviceGetAttribute"));
  if (init && get && name && init(0) == 0) {
    constexpr int kComputeCapabilityMajor = 75, kComputeCapabilityMinor = 76;  // CUdevice_attribute
    for (int i = 0; i < count; ++i) {
      int device = 0;
      if (get(&device, i) != 0) continue;
      GpuInfo gpu;
      gpu.index = i;
      char buf[256] = {};
      gpu.name = name(buf, sizeof buf - 1, device) == 0 ? buf : "unknown";
      size_t bytes = 0;
      if (mem && mem(&bytes, device) == 0) gpu.total_memory_bytes = bytes;
      int major = 0, minor = 0;
      if (attr && attr(&major, kComputeCapabilityMajor, device) == 0 &&
          attr(&minor, kComputeCapabilityMinor, device) == 0)
        gpu.compute_capability = dotted(major, minor);
      gpus.push_back(gpu);
    }
  }
  dlclose(lib);  // balances this function's dlopen; the CUDA runtime keeps its own reference
  return gpus;
}

}  // namespace

TorchFacts collect_torch_facts() {
  TorchFacts t;
  std::string config;
  try {
    config = at::show_config();
  } catch (const std::exception&) {
  }
  t.runtime_version = build_setting(config, "TORCH_VERSION");
#ifdef TORCH_VERSION
  t.version = TORCH_VERSION;
#else
  t.version = t.runtime_version.empty() ? "unknown" : t.runtime_version;
#endif
  Dl_info where{};
  if (dladdr(reinterpret_cast<void*>(&at::show_config), &where) != 0 && where.dli_fname) t.library_path = where.dli_fname;
  t.blas_info = build_setting(config, "BLAS_INFO");
  t.lapack_info = build_setting(config, "LAPACK_INFO");
  t.built_with_cuda = build_setting(config, "USE_CUDA") == "ON";
  t.intra_op_threads = at::get_num_threads();
  t.inter_op_threads = at::get_num_interop_threads();
  t.mkl = at::get_mkl_version();
  t.openmp = at::get_openmp_version();

  const auto& hooks = at::detail::getCUDAHooks();
  try {
    t.cuda_runtime_version = cuda_version_string(hooks.versionCUDART());
    t.cuda_library_loaded = true;
    t.built_with_cuda = true;
    if (hooks.compiledWithCuDNN()) t.cudnn_version = cudnn_version_string(hooks.versionCuDNN());
  } catch (const std::exception&) {
    // CPU-only libtorch, or libtorch_cuda not loaded: the default hooks throw.
  }
  try {
    t.cuda_available = torch::cuda::is_available();
    t.cuda_device_count = t.cuda_available ? static_cast<int>(torch::cuda::device_count()) : 0;
  } catch (const std::exception&) {
    t.cuda_available = false;
  }
  if (t.built_with_cuda) t.nccl_version = nccl_version();
  if (t.cuda_available) t.gpus = query_gpus(t.cuda_device_count);
  return t;
}

}  // namespace accel::diag
