// The NCCL communicator: accel's Communicator over libtorch's own c10d::ProcessGroupNCCL, for CUDA
// tensors on this rank's GPU (docs/design/0014-cuda-communicators.md). It uses the NCCL that the
// torch wheel loads (the nvidia-nccl wheel beside it), never a second one.
// Invariants: construction binds the group to `device` and returns once the NCCL communicator is
// connected (or throws CommError); ops are issued from the calling thread onto NCCL's own stream,
// ordered after the caller's current stream; Work::wait() orders the caller's current stream after
// the op (the host does not block; barrier() does block); a collective that outlives the timeout is
// reported by torch's watchdog, which names the op and ends the process, and the launcher then
// names the rank and stops the job.
// Only nccl_communicator.cpp includes ProcessGroupNCCL.hpp (CUDA and nccl.h on its include path).
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

// True when this build has the NCCL communicator (libtorch built with CUDA and NCCL's header found).
bool nccl_communicator_built();

// The test switch ACCEL_NCCL_ISSUE_AT_WORLD_ONE=1: a world of one sends every op through NCCL and
// pads every reduce-scatter and all-gather, so one GPU runs the NCCL calls, their stream ordering,
// the padding and the averaging that otherwise only several GPUs reach. Off (the default), a world
// of one copies locally and sends nothing.
bool nccl_issues_at_world_one();

// Connects rank `rank` of `size` on GPU `device_index` (the caller has made it the current device).
// `store_prefix` must be fresh per communicator on `store`, as for make_gloo_communicator.
// Throws CommError naming the rank, world, GPU and timeout when set-up fails, or when this build has
// no NCCL (saying how to get one).
std::unique_ptr<Communicator> make_nccl_communicator(c10::intrusive_ptr<c10d::Store> store, int rank, int size,
                                                     std::chrono::milliseconds timeout, int device_index,
                                                     const std::string& store_prefix = "nccl");

}  // namespace accel::comm
