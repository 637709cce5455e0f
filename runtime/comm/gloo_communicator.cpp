// GlooCommunicator: the Communicator over Gloo's TCP transport (CPU tensors). all_reduce, all_gather
// (allgatherv), broadcast and barrier use Gloo's collectives; reduce_scatter is accel's ring over
// Gloo's point-to-point buffers (gloo_ring_reduce_scatter.hpp).
// Invariants: arguments are checked and the op counted on the issuing thread; the op itself runs on
// the OpQueue worker with a per-op tag identical on every rank (ops are issued in the same order);
// every Gloo wait uses the communicator timeout; Gloo's threads run with SIGPIPE blocked, so a peer
// that vanishes mid-op is an error on this rank, never a killed process.
#include "runtime/comm/gloo_communicator.hpp"

#include <gloo/allgatherv.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>
#include <pthread.h>
#include <signal.h>

#include <sstream>
#include <stdexcept>

#include "runtime/comm/gloo_ring_reduce_scatter.hpp"
#include "runtime/comm/gloo_store_adapter.hpp"
#include "runtime/comm/op_checks.hpp"
#include "runtime/comm/op_queue.hpp"
#include "runtime/comm/reduce_kernels.hpp"
#include "runtime/comm/shard_layout.hpp"

namespace accel::comm {
namespace {

// Blocks SIGPIPE on this thread for the scope; threads started inside the scope (Gloo's device
// loop, the op worker) inherit the block for life. A SIGPIPE raised here meanwhile is discarded.
class ScopedSigpipeBlock {
 public:
  ScopedSigpipeBlock() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
  }
  ~ScopedSigpipeBlock() {
    sigset_t pending;
    sigemptyset(&pending);
    if (!sigismember(&old_, SIGPIPE) && sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE)) {
      timespec zero{0, 0};
      sigtimedwait(&pipe_, nullptr, &zero);
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  ScopedSigpipeBlock(const ScopedSigpipeBlock&) = delete;
  ScopedSigpipeBlock& operator=(const ScopedSigpipeBlock&) = delete;

 private:
  sigset_t pipe_;
  sigset_t old_;
};

// Gloo's typed option setters only use sizeof(T) to size buffers (the arithmetic is our reduce
// kernel), so an unsigned type of the element's width stands in for every dtype.
template <typename Fn>
void with_storage_type(size_t element_size, Fn&& fn) {
  switch (element_size) {
    case 2: return fn(uint16_t{});
    case 4: return fn(uint32_t{});
    case 8: return fn(uint64_t{});
    default: break;
  }
  throw std::invalid_argument("gloo communicator: unsupported element size " + std::to_string(element_size));
}

std::vector<size_t> shard_counts(int64_t numel, int world) {
  std::vector<size_t> counts(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) counts[r] = static_cast<size_t>(shard_range(numel, world, r).size());
  return counts;
}

class GlooCommunicator final : public Communicator {
 public:
  // `store`, `bind_address` and `store_prefix` are kept to connect the groups split() forms.
  GlooCommunicator(std::shared_ptr<gloo::Context> context, std::chrono::milliseconds timeout,
                   std::shared_ptr<c10d::Store> store, std::string bind_address, std::string store_prefix)
      : context_(std::move(context)),
        rank_(context_->rank),
        size_(context_->size),
        timeout_(timeout),
        store_(std::move(store)),
        bind_address_(std::move(bind_address)),
        store_prefix_(std::move(store_prefix)),
        queue_(std::make_unique<OpQueue>(rank_, size_)) {}

  // The queue goes first: queued ops are cancelled and the running one (bounded by the timeout)
  // finishes before the Gloo context and its connections are torn down.
  ~GlooCommunicator() override { queue_->shutdown(); }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend_name() const override { return "gloo"; }
  std::chrono::milliseconds timeout() const override { return timeout_; }

  WorkPtr all_reduce(at::Tensor tensor, ReduceOp op) override {
    check_all_reduce_args(tensor, rank_, size_);
    stats_.record(CollectiveKind::AllReduce, tensor_bytes(tensor));
    return enqueue("all_reduce", [this, tensor, op]() mutable {
      const uint32_t tag = next_tag_++;
      if (size_ > 1 && tensor.numel() > 0) {
        gloo::AllreduceOptions opts(context_);
        with_storage_type(tensor.element_size(), [&](auto storage) {
          using S = decltype(storage);
          opts.setOutput<S>(static_cast<S*>(tensor.data_ptr()), static_cast<size_t>(tensor.numel()));
        });
        opts.setReduceFunction(reduce_kernel(tensor.scalar_type(), op));
        opts.setTag(tag);
        opts.setTimeout(timeout_);
        gloo::allreduce(opts);
      }
      if (op == ReduceOp::Avg) finish_average(tensor, size_);
    });
  }

  WorkPtr reduce_scatter(at::Tensor input, at::Tensor output, ReduceOp op) override {
    return reduce_scatter_impl(std::move(input), std::move(output), op, false);
  }

  WorkPtr reduce_scatter_consuming(at::Tensor input, at::Tensor output, ReduceOp op) override {
    return reduce_scatter_impl(std::move(input), std::move(output), op, true);
  }

  WorkPtr reduce_scatter_impl(at::Tensor input, at::Tensor output, ReduceOp op, bool consume_input) {
    const ShardRange shard = check_reduce_scatter_args(input, output, rank_, size_);
    const int64_t numel = input.numel();
    stats_.record(CollectiveKind::ReduceScatter, tensor_bytes(input));
    // The ring clobbers its buffer: it may be `input` itself only when the caller gave it up and
    // `output` is not a view of it.
    const bool in_place = consume_input && input.is_contiguous() && !input.is_alias_of(output);
    return enqueue("reduce_scatter", [this, input, output, op, numel, shard, in_place]() mutable {
      const uint32_t tag = next_tag_++;
      if (size_ == 1 || numel == 0) {
        output.view(-1).copy_(input.view(-1));
      } else {
        at::Tensor accumulator = in_place ? input.view(-1) : input.reshape(-1).clone();
        RingReduceScatterArgs args;
        args.context = context_;
        args.accumulator = accumulator.data_ptr();
        args.counts = shard_counts(numel, size_);
        args.element_size = static_cast<size_t>(input.element_size());
        args.reduce = reduce_kernel(input.scalar_type(), op);
        args.tag = tag;
        args.timeout = timeout_;
        ring_reduce_scatter(args);
        output.view(-1).copy_(accumulator.narrow(0, shard.begin, shard.size()));
      }
      if (op == ReduceOp::Avg) finish_average(output, size_);
    });
  }

  WorkPtr all_gather(at::Tensor input, at::Tensor output) override {
    const ShardRange shard = check_all_gather_args(input, output, rank_, size_);
    const int64_t numel = output.numel();
    stats_.record(CollectiveKind::AllGather, tensor_bytes(output));
    return enqueue("all_gather", [this, input, output, numel, shard]() mutable {
      const uint32_t tag = next_tag_++;
      // Place our shard first; allgatherv then runs "in place" (no input buffer). A no-op copy when
      // `input` is already that slice of `output`.
      output.view(-1).narrow(0, shard.begin, shard.size()).copy_(input.view(-1));
      if (size_ == 1 || numel == 0) return;
      gloo::AllgathervOptions opts(context_);
      with_storage_type(output.element_size(), [&](auto storage) {
        using S = decltype(storage);
        opts.setOutput<S>(static_cast<S*>(output.data_ptr()), shard_counts(numel, size_));
      });
      opts.setTag(tag);
      opts.setTimeout(timeout_);
      gloo::allgatherv(opts);
    });
  }

  WorkPtr broadcast(at::Tensor tensor, int root) override {
    check_broadcast_args(tensor, root, rank_, size_);
    stats_.record(CollectiveKind::Broadcast, tensor_bytes(tensor));
    return enqueue("broadcast", [this, tensor, root]() mutable {
      const uint32_t tag = next_tag_++;
      if (size_ == 1 || tensor.numel() == 0) return;
      gloo::BroadcastOptions opts(context_);
      with_storage_type(tensor.element_size(), [&](auto storage) {
        using S = decltype(storage);
        opts.setOutput<S>(static_cast<S*>(tensor.data_ptr()), static_cast<size_t>(tensor.numel()));
      });
      opts.setRoot(root);
      opts.setTag(tag);
      opts.setTimeout(timeout_);
      gloo::broadcast(opts);
    });
  }

  // A group is a fresh Gloo full mesh among its members, rendezvousing under a prefix unique to
  // this split and color (the parent's prefix is fresh per launch attempt, so these are too).
  std::unique_ptr<Communicator> split(int color) override {
    const SplitGroup g = exchange_split_colors(*this, color);
    return make_gloo_communicator(store_, g.rank, g.size, timeout_, bind_address_,
                                  store_prefix_ + "/split" + std::to_string(g.sequence) + "/color" +
                                      std::to_string(g.color));
  }

  WorkPtr barrier() override {
    stats_.record(CollectiveKind::Barrier, 0);
    return enqueue("barrier", [this]() {
      const uint32_t tag = next_tag_++;
      if (size_ == 1) return;
      gloo::BarrierOptions opts(context_);
      opts.setTag(tag);
      opts.setTimeout(timeout_);
      gloo::barrier(opts);
    });
  }

 private:
  // Runs `fn` on the worker; Gloo's exceptions become CommErrors naming op, rank, world, timeout.
  template <typename Fn>
  WorkPtr enqueue(const char* op, Fn fn) {
    return queue_->submit(op, [this, op, fn = std::move(fn)]() mutable {
      try {
        fn();
      } catch (const CommError&) {
        throw;
      } catch (const std::exception& e) {
        throw CommError(describe_failure(op, e.what()));
      }
    });
  }

  std::string describe_failure(const char* op, const std::string& what) const {
    std::ostringstream msg;
    msg << op << " on " << rank_of_world(rank_, size_) << " (gloo): ";
    const bool timed_out = what.find("Timed out") != std::string::npos || what.find("timed out") != std::string::npos;
    if (timed_out) {
      msg << "timed out after " << timeout_.count()
          << " ms waiting for a peer rank; every rank must issue the same collectives in the same order";
    } else {
      msg << "failed (timeout " << timeout_.count() << " ms); a peer rank may have failed or exited";
    }
    msg << ". Gloo: " << what;
    return msg.str();
  }

  std::shared_ptr<gloo::Context> context_;
  const int rank_;
  const int size_;
  const std::chrono::milliseconds timeout_;
  const std::shared_ptr<c10d::Store> store_;
  const std::string bind_address_;
  const std::string store_prefix_;
  uint32_t next_tag_ = 0;  // touched only by the worker thread
  std::unique_ptr<OpQueue> queue_;
};

}  // namespace

std::unique_ptr<Communicator> make_gloo_communicator(std::shared_ptr<c10d::Store> store, int rank, int size,
                                                     std::chrono::milliseconds timeout,
                                                     const std::string& bind_address,
                                                     const std::string& store_prefix) {
  if (size < 1 || rank < 0 || rank >= size) {
    throw CommError("gloo communicator: rank " + std::to_string(rank) + " is out of range for world size " +
                    std::to_string(size));
  }
  const std::string where = "gloo communicator setup on " + rank_of_world(rank, size);
  if (!store) throw CommError(where + ": the c10d store is null");
  if (timeout.count() <= 0) {
    throw CommError(where + ": timeout must be positive, got " + std::to_string(timeout.count()) + " ms");
  }
  ScopedSigpipeBlock no_sigpipe;  // Gloo's loop thread and our worker inherit the blocked mask
  std::shared_ptr<gloo::rendezvous::Context> context;
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = bind_address;
    auto device = gloo::transport::tcp::CreateDevice(attr);
    context = std::make_shared<gloo::rendezvous::Context>(rank, size);
    context->setTimeout(timeout);
    C10dStoreAdapter adapter(store, store_prefix, timeout);
    context->connectFullMesh(adapter, device);
  } catch (const std::exception& e) {
    throw CommError(where + " failed (bind address '" + bind_address + "', store prefix '" + store_prefix +
                    "', timeout " + std::to_string(timeout.count()) + " ms): " + e.what());
  }
  return std::make_unique<GlooCommunicator>(std::move(context), timeout, std::move(store), bind_address, store_prefix);
}

}  // namespace accel::comm
