// The world of the Accelerator a process is running, for library code that is not handed one
// (accel::SyncBatchNorm, include/accel/sync_batch_norm.hpp). Each Accelerator records its
// communicator when constructed and clears it when destroyed (accelerator.cpp): the one constructed
// last is current until it goes.
#pragma once

#include <ATen/core/Tensor.h>

namespace accel::detail {

// In place: `tensor` summed over the current Accelerator's world (any device: staged through the
// communicator's). Nothing with no Accelerator or a world of one. Collective: every rank calls it
// in the same order as its other collectives; throws std::runtime_error when the collective fails.
void all_reduce_sum(at::Tensor& tensor);

}  // namespace accel::detail
