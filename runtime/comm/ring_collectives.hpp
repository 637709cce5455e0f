// Bandwidth-optimal ring reduce-scatter and all-gather over a c10d::Backend's point-to-point
// send/recv, with per-rank chunk sizes chosen by the caller (shard_range() sizes: uneven and empty
// chunks work). Why not the backend's own: libtorch 2.11's Gloo `_reduce_scatter_base` is an
// all-reduce followed by a slice (2x the bytes), and its all-gather needs equal chunks. Each rank
// sends and receives (W-1)/W of the buffer, as the ring algorithms in NCCL and Gloo do.
// Invariants: every rank calls with identical counts and the same `first_tag`, and issues nothing
// else on the backend meanwhile; every wait on a peer is bounded by `timeout`; message matching
// never depends on timing (each step has its own tag, and empty chunks are skipped identically by
// sender and receiver).
#pragma once

#include <ATen/ATen.h>

#include <chrono>
#include <cstdint>
#include <vector>

#include "runtime/comm/reduce_kernels.hpp"

namespace c10d {
class Backend;
}

namespace accel::comm {

struct RingArgs {
  c10d::Backend* backend = nullptr;
  std::vector<int64_t> counts;           // elements per rank, in rank order
  int first_tag = 0;                     // tags first_tag .. first_tag + W - 2 are used
  std::chrono::milliseconds timeout{0};  // bounds each wait on a peer
};

// Number of tags one ring collective uses (the caller advances its tag counter by this much).
int ring_tags(int world);

// On return, this rank's chunk of `accumulator` (1-D, contiguous, this rank's contribution on entry)
// holds the reduction over all ranks; the other chunks hold partial sums (scratch).
void ring_reduce_scatter(const RingArgs& args, at::Tensor accumulator, ReduceFn reduce);

// On entry this rank's chunk of `buffer` (1-D, contiguous) holds its data; on return every chunk
// holds its owner's data.
void ring_all_gather(const RingArgs& args, at::Tensor buffer);

// Element offset of rank `r`'s chunk: the sum of counts before it.
int64_t chunk_offset(const std::vector<int64_t>& counts, int r);

}  // namespace accel::comm
