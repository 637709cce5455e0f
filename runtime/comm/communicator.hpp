// The Communicator: accel's narrow, c10d-like collective interface (see docs/design/0002-runtime-contracts.md).
// Invariants every implementation keeps:
//  - Collectives are issued in the same order on every rank and complete in issue order.
//  - Every op is asynchronous and returns a Work; Work::wait() rethrows a failure as CommError.
//  - Every op has a timeout (the communicator's default): a peer that never arrives raises a
//    CommError naming the op, the rank and the timeout, instead of hanging.
//  - Tensors are contiguous and dense, on the communicator's device(); dtype matches across ranks.
//  - Work::wait() on a CPU communicator returns once the op completed. On a CUDA communicator it
//    orders the caller's current CUDA stream after the op (the device finishes it; the host does
//    not block), as c10d's NCCL work does: a host reader must synchronise the stream first.
//  - Uneven sizes work: reduce_scatter and all_gather use shard_range() (shard_layout.hpp).
//  - Every op is counted in stats() (calls, payload bytes) when it is issued. Bad arguments throw
//    CommError from the issuing call itself (not through Work::wait) and are neither counted nor sent.
//  - The timeout bounds each wait on a peer; an op queued behind others may wait several timeouts.
//  - After any failure the communicator is unusable: later ops fail fast with the first error.
//  - Issue from one thread at a time (stats are not synchronised).
//  - Avg on integer dtypes truncates toward zero; Max passes NaN through.
#pragma once

#include <ATen/ATen.h>

#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/comm/comm_stats.hpp"

namespace accel::comm {

enum class ReduceOp { Sum, Avg, Max };
const char* to_string(ReduceOp op);

// A collective failed or timed out. The message names the op, the rank and the world size.
class CommError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Work {
 public:
  virtual ~Work() = default;
  // Blocks until the op completed; throws CommError if it failed or timed out.
  virtual void wait() = 0;
  virtual bool is_completed() = 0;
};
using WorkPtr = std::shared_ptr<Work>;

// A Work that is already complete (an op with nothing to wait for: world 1, empty tensors).
WorkPtr completed_work();

// This rank's place in the group a split() forms.
struct SplitGroup {
  int color = 0;
  int rank = 0;        // in the group
  int size = 1;        // of the group
  int sequence = 0;    // how many splits of the parent came before (unique names for the group)
  std::vector<int> members;  // the parent ranks in the group, ascending (its rank order)
};

class Communicator;
// The exchange every split() starts with: all-gathers each rank's color over `parent` (counted in
// its stats) and returns this rank's group. Throws CommError for a negative color.
SplitGroup exchange_split_colors(Communicator& parent, int color);

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string backend_name() const = 0;  // "gloo", "nccl", "fake"
  virtual std::chrono::milliseconds timeout() const = 0;
  // Where its tensors live: CPU for Gloo and the fake, this rank's GPU for NCCL.
  virtual at::Device device() const { return at::kCPU; }

  // In place: every rank ends with the reduction over all ranks of `tensor`.
  virtual WorkPtr all_reduce(at::Tensor tensor, ReduceOp op) = 0;
  // `input` is the full flat buffer (numel N, the same on every rank); `output` receives this
  // rank's shard of the reduction: shard_range(N, size(), rank()).size() elements.
  virtual WorkPtr reduce_scatter(at::Tensor input, at::Tensor output, ReduceOp op) = 0;
  // The same, but the caller gives `input` up (a unit's gradient buffer, freed afterwards): its
  // values are undefined after the op, so an implementation may reduce in it instead of in a
  // copy of it (a unit-sized allocation per op). The default is reduce_scatter.
  virtual WorkPtr reduce_scatter_consuming(at::Tensor input, at::Tensor output, ReduceOp op) {
    return reduce_scatter(std::move(input), std::move(output), op);
  }
  // `input` is this rank's shard (shard_range(N, size(), rank()).size() elements); `output` is the
  // full flat buffer of N elements, filled with every rank's shard in rank order.
  virtual WorkPtr all_gather(at::Tensor input, at::Tensor output) = 0;
  // In place: every rank ends with root's `tensor`.
  virtual WorkPtr broadcast(at::Tensor tensor, int root) = 0;
  virtual WorkPtr barrier() = 0;

  // Collective over this communicator (every rank calls it, in the same order as its other ops):
  // the ranks passing the same `color` (>= 0) form a new communicator, ranked in this one's rank
  // order (MPI_Comm_split, ncclCommSplit with key = rank). The new communicator has its own stats
  // and this one's timeout; this one stays usable. HYBRID_SHARD builds its per-machine groups so.
  // The base implementation throws CommError (wrappers and test doubles that cannot split).
  virtual std::unique_ptr<Communicator> split(int color);

  const CommStats& stats() const { return stats_; }
  void reset_stats() { stats_ = {}; }

 protected:
  CommStats stats_;

 private:
  friend SplitGroup exchange_split_colors(Communicator& parent, int color);
  int splits_ = 0;  // split() calls so far
};

// Host values reduced over `comm` (a loss, a norm, a counter), through a tensor on the
// communicator's device: a CUDA communicator takes no CPU tensors. Blocks until the result is here.
std::vector<double> all_reduce_values(Communicator& comm, const std::vector<double>& values, ReduceOp op);
inline double all_reduce_value(Communicator& comm, double value, ReduceOp op) {
  return all_reduce_values(comm, {value}, op)[0];
}

}  // namespace accel::comm
