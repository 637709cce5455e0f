// See gloo_backend.hpp. Compiled with Debian's Gloo headers on its include path and nothing from
// Gloo linked: ProcessGroupGloo's layout holds Gloo objects only behind pointers, and the symbols
// used here (the constructor, createDeviceForHostname, Options) are libtorch_cpu's.
#include "runtime/comm/gloo_backend.hpp"

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

namespace accel::comm {

c10::intrusive_ptr<c10d::Backend> make_gloo_backend(const c10::intrusive_ptr<c10d::Store>& store,
                                                    const GlooBackendOptions& options) {
  auto gloo_options = c10d::ProcessGroupGloo::Options::create(options.timeout);
  gloo_options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(options.bind_address));
  gloo_options->threads = options.threads;
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, options.rank, options.size, gloo_options);
}

}  // namespace accel::comm
