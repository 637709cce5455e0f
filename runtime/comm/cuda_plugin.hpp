// accel's CUDA side as a plugin (docs/design/0029): libaccel_cuda.so holds the code that needs
// libtorch_cuda (the NCCL communicator), and nothing else in accel links libtorch_cuda. A CPU rank
// therefore never loads libtorch_cuda, cuBLAS, cuDNN, cuSPARSE, cuFFT or NCCL: about 350 MiB of
// mappings and 0.2 s of CPU less at every process start. A process that uses a GPU loads the plugin
// first (load_cuda_plugin); loading it loads libtorch_cuda, whose static initializers register
// torch's CUDA backend, so from then on CUDA tensors, streams, events and pinned memory work through
// libtorch's ordinary device-generic API.
// Invariants: the plugin is loaded at most once per process and never unloaded; it exports one C
// entry point (kCudaPluginEntry) and keeps every accel symbol it contains local, so its copies of
// accel code never interpose on the host's (or the host's on its); a plugin of another ABI version
// is refused with a message naming both.
#pragma once

#include <c10/util/intrusive_ptr.h>

#include <chrono>
#include <memory>
#include <string>

#include "runtime/comm/communicator.hpp"

namespace c10d {
class Store;
}

namespace accel::comm {

// The plugin's file name, found the way dlopen finds a bare name: the loading binary's RUNPATH (the
// directory of libaccel.so, in the build tree and in an installed tree), then LD_LIBRARY_PATH.
inline constexpr char kCudaPluginFile[] = "libaccel_cuda.so";
// The plugin's one exported symbol: void accel_cuda_plugin(CudaPluginApi*).
inline constexpr char kCudaPluginEntry[] = "accel_cuda_plugin";
// Bumped whenever CudaPluginApi or the types it passes change.
inline constexpr int kCudaPluginAbi = 1;

using NcclFactory = std::unique_ptr<Communicator> (*)(c10::intrusive_ptr<c10d::Store> store, int rank, int size,
                                                       std::chrono::milliseconds timeout, int device_index,
                                                       const std::string& store_prefix);

// What the plugin hands the host.
struct CudaPluginApi {
  int abi = 0;                    // kCudaPluginAbi of the plugin's build
  bool nccl_built = false;        // false: libtorch has CUDA but NCCL's header was missing at build time
  NcclFactory make_nccl = nullptr;
};

// Whether this build has a CUDA plugin at all (libtorch with CUDA at configure time).
bool cuda_plugin_built();

// Loads the plugin (thread-safe, once; later calls return the first outcome). On failure returns
// null and, when `why` is given, says why (the dlopen error, or "built without CUDA").
const CudaPluginApi* load_cuda_plugin(std::string* why = nullptr);

// load_cuda_plugin(), or throws CommError naming `what` (for example "device: cuda"), the reason
// and the fix.
const CudaPluginApi& require_cuda_plugin(const std::string& what);

}  // namespace accel::comm
