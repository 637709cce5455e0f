// Loading libaccel_cuda.so on demand (see the header). No CUDA header here: this file is part of
// every accel process, CPU ones included.
#include "runtime/comm/cuda_plugin.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>

#include "runtime/comm/nccl_communicator.hpp"
#include "runtime/comm/op_checks.hpp"

namespace accel::comm {
namespace {

struct Loaded {  // the one load's outcome
  CudaPluginApi api;
  std::string error;  // empty when loaded
};

Loaded load_plugin_once() {
  Loaded out;
  if (!cuda_plugin_built()) {
    out.error = "this accel was built without CUDA (its libtorch has no CUDA); build against the CUDA torch "
                "wheel (scripts/setup.sh) or use device: cpu";
    return out;
  }
  // RTLD_GLOBAL: libtorch_cuda, which the plugin brings, must be visible to everything loaded later.
  void* handle = dlopen(kCudaPluginFile, RTLD_NOW | RTLD_GLOBAL);
  if (handle == nullptr) {
    const char* err = dlerror();
    out.error = "cannot load accel's CUDA plugin ";
    out.error += kCudaPluginFile;
    out.error += ": ";
    out.error += err ? err : "unknown error";
    out.error += " (it is built by `cmake --build build --target accel_cuda` or scripts/build.sh, and installed "
                 "beside libaccel.so; LD_LIBRARY_PATH may name its directory)";
    return out;
  }
  using Entry = void (*)(CudaPluginApi*);
  auto entry = reinterpret_cast<Entry>(dlsym(handle, kCudaPluginEntry));
  if (entry == nullptr) {
    out.error = kCudaPluginFile;
    out.error += " has no entry point ";
    out.error += kCudaPluginEntry;
    out.error += ": not accel's CUDA plugin";
    return out;
  }
  entry(&out.api);
  if (out.api.abi != kCudaPluginAbi) {
    out.error = kCudaPluginFile;
    out.error += " has plugin ABI " + std::to_string(out.api.abi) + ", this accel needs " +
                 std::to_string(kCudaPluginAbi) + ": the plugin and libaccel.so come from different builds";
  }
  return out;
}

const Loaded& plugin_state() {
  static const Loaded once = load_plugin_once();  // thread-safe, and never unloaded
  return once;
}

}  // namespace

bool cuda_plugin_built() {
#if defined(ACCEL_WITH_CUDA_PLUGIN)
  return true;
#else
  return false;
#endif
}

const CudaPluginApi* load_cuda_plugin(std::string* why) {
  const Loaded& l = plugin_state();
  if (!l.error.empty()) {
    if (why) *why = l.error;
    return nullptr;
  }
  return &l.api;
}

const CudaPluginApi& require_cuda_plugin(const std::string& what) {
  std::string why;
  const CudaPluginApi* api = load_cuda_plugin(&why);
  if (api == nullptr) throw CommError(what + ": " + why);
  return *api;
}

bool nccl_communicator_built() {
  const CudaPluginApi* api = load_cuda_plugin();
  return api != nullptr && api->nccl_built;
}

// A one-rank communicator is valid NCCL; padding every chunk by one element (equal_chunks) sends the
// one-GPU run through the padded buffers as well.
bool nccl_issues_at_world_one() {
  const char* flag = std::getenv("ACCEL_NCCL_ISSUE_AT_WORLD_ONE");
  return flag != nullptr && std::string(flag) == "1";
}

std::unique_ptr<Communicator> make_nccl_communicator(c10::intrusive_ptr<c10d::Store> store, int rank, int size,
                                                     std::chrono::milliseconds timeout, int device_index,
                                                     const std::string& store_prefix) {
  const std::string what = "nccl communicator on " + rank_of_world(rank, size);
  const CudaPluginApi& api = require_cuda_plugin(what);
  if (!api.nccl_built || api.make_nccl == nullptr) {
    throw CommError(what + ": this accel was built without NCCL (nccl.h was not found beside the torch wheel at "
                           "configure time); rebuild after scripts/setup.sh, or use cuda_collectives: gloo");
  }
  return api.make_nccl(std::move(store), rank, size, timeout, device_index, store_prefix);
}

}  // namespace accel::comm
