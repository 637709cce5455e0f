// The host-staged communicator: CUDA tensors through a CPU communicator (Gloo). Each op copies its
// device tensors into host tensors, runs the host op, and copies the result back in wait(). It is
// how CUDA workers communicate when they cannot use NCCL: several ranks sharing one GPU (NCCL
// refuses two ranks on one device), which is how the CUDA engine is tested at world 2 on a
// one-GPU machine (`cuda_collectives: gloo`, docs/design/0014). Slow by construction: every
// collective crosses PCIe twice and blocks the host.
// Invariants: the Communicator contract on `device`'s tensors, with Work::wait() blocking the
// host until the result is on the device; stats count each op once (here, not the host op's).
#pragma once

#include <memory>

#include "runtime/comm/communicator.hpp"

namespace accel::comm {

// Wraps `host` (a CPU communicator; takes ownership). Tensors must be on `device`. For a CPU
// `device` it still stages through separate host copies, which is how its logic is tested on
// machines without a GPU.
std::unique_ptr<Communicator> make_host_staged_communicator(std::unique_ptr<Communicator> host, at::Device device);

}  // namespace accel::comm
