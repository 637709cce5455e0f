// accel's CUDA plugin (runtime/comm/cuda_plugin.hpp, docs/design/0029) from a CPU process: this
// program links libtorch_cpu only, so libtorch_cuda enters it only when the plugin is loaded; once
// loaded, torch's CUDA backend is registered, the plugin is not loaded twice, and an error thrown
// inside it is caught here by its type.
#include "tests/support/catch_with_torch.hpp"

#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <fstream>

#include "runtime/comm/cuda_plugin.hpp"
#include "runtime/comm/nccl_communicator.hpp"

using namespace accel::comm;
using namespace std::chrono_literals;

namespace {

// Whether a library whose file name contains `name` is mapped into this process.
bool library_mapped(const std::string& name) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    if (line.find(name) != std::string::npos) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("cuda plugin: loaded on demand by a CPU process; its errors cross as CommError", "[cuda_plugin]") {
  std::string why;
  if (!cuda_plugin_built()) {
    CHECK(load_cuda_plugin(&why) == nullptr);
    CHECK_THAT(why, Catch::Matchers::Contains("built without CUDA"));
    CHECK_THROWS_WITH(make_nccl_communicator(c10::make_intrusive<c10d::HashStore>(), 0, 1, 1000ms, 0),
                      Catch::Matchers::Contains("built without CUDA"));
    return;
  }
  CHECK_FALSE(library_mapped("libtorch_cuda.so"));
  CHECK_FALSE(library_mapped("libnccl.so"));
  CHECK_FALSE(c10::impl::hasDeviceGuardImpl(c10::DeviceType::CUDA));

  const CudaPluginApi* api = load_cuda_plugin(&why);
  INFO(why);
  REQUIRE(api != nullptr);
  CHECK(api->abi == kCudaPluginAbi);
  CHECK(library_mapped("libaccel_cuda.so"));
  CHECK(library_mapped("libtorch_cuda.so"));
  CHECK(c10::impl::hasDeviceGuardImpl(c10::DeviceType::CUDA));  // torch's CUDA backend registered
  CHECK(load_cuda_plugin() == api);                              // loaded once
  CHECK(&require_cuda_plugin("test") == api);

  if (api->nccl_built) {
    CHECK(nccl_communicator_built());
    // Rank 3 of 2 is refused inside the plugin, before any GPU is touched; the host catches the
    // plugin's CommError as its own type.
    auto store = c10::make_intrusive<c10d::HashStore>();
    CHECK_THROWS_AS(make_nccl_communicator(store, 3, 2, 1000ms, 0), CommError);
    CHECK_THROWS_WITH(make_nccl_communicator(store, 3, 2, 1000ms, 0),
                      Catch::Matchers::Contains("rank 3 is out of range for world size 2"));
  }
}
