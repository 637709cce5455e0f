// NcclCommunicator: the Communicator over c10d::ProcessGroupNCCL, used as a plain c10d::Backend (see
// the header and docs/design/0014), built into accel's CUDA plugin (cuda_plugin.hpp, design 0029). Why c10d's backend and not the NCCL C API with a unique id
// through the store: it is the NCCL torch itself loads and was built against, and it brings what a
// hand-written one would have to repeat: the caching-allocator safety of tensors used on NCCL's
// stream (recordStream), the watchdog that turns a hung collective into an error naming the op,
// and communicator abort on shutdown.
// Invariants: arguments are checked and the op counted before it is issued; ranks issue the same
// ops in the same order (NCCL matches collectives by order); uneven reduce_scatter / all_gather
// sizes (shard_range) go through zero-padded buffers, finished on the caller's stream in wait().
#include "runtime/comm/nccl_communicator.hpp"
#include "runtime/comm/cuda_plugin.hpp"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include "runtime/comm/op_checks.hpp"
#include "runtime/comm/reduce_kernels.hpp"
#include "runtime/comm/shard_layout.hpp"

#if defined(ACCEL_WITH_NCCL)
#include <c10/cuda/CUDAGuard.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <cstdlib>
#include <functional>
#include <sstream>

namespace accel::comm {

#if defined(ACCEL_WITH_NCCL)

// Connects this rank's NCCL communicator (make_nccl_communicator's contract, nccl_communicator.hpp);
// the host reaches it through the plugin's entry point, split() directly.
std::unique_ptr<Communicator> connect_nccl(c10::intrusive_ptr<c10d::Store> store, int rank, int size,
                                           std::chrono::milliseconds timeout, int device_index,
                                           const std::string& store_prefix);

namespace {

// A c10d work plus what must run on the caller's stream once the op is done (copying a padded
// result out, dividing an integer average). Keeps the padded buffers alive until then.
class NcclWork final : public Work {
 public:
  NcclWork(c10::intrusive_ptr<c10d::Work> work, std::string what, std::function<void()> finish)
      : work_(std::move(work)), what_(std::move(what)), finish_(std::move(finish)) {}

  void wait() override {
    if (done_) return;
    try {
      work_->wait();  // the caller's current stream now waits for the op
    } catch (const std::exception& e) {
      throw CommError(what_ + " failed: " + exception_text(e));
    }
    if (finish_) finish_();
    finish_ = nullptr;
    done_ = true;
  }
  bool is_completed() override { return done_ || work_->isCompleted(); }

 private:
  c10::intrusive_ptr<c10d::Work> work_;
  std::string what_;
  std::function<void()> finish_;
  bool done_ = false;
};

// NCCL's reduce-scatter and all-gather need equal chunks; shard_range gives rank r its shard at
// r * chunk, the last ones one element shorter. The (full, shard) pair as NCCL takes it: the tensors
// themselves when numel divides evenly, else zero-padded buffers of chunk * world and chunk elements,
// with the source side (the full tensor when `from_full`, else the shard) copied in.
struct EqualChunks {
  at::Tensor full;
  at::Tensor shard;
  bool padded = false;
};

// `pad_one_more` (the world-of-one test switch only) adds one element to every chunk, so a one-GPU run
// goes through the padded buffers too; at a larger world it would move the shards' offsets.
EqualChunks equal_chunks(const at::Tensor& full, const at::Tensor& shard, int world, bool from_full,
                         bool pad_one_more) {
  const int64_t numel = full.numel();
  const int64_t chunk = shard_chunk(numel, world) + (pad_one_more ? 1 : 0);
  EqualChunks c{full.view(-1), shard.view(-1), chunk * world != numel};
  if (!c.padded) return c;
  c.full = from_full ? at::zeros({chunk * world}, full.options()) : at::empty({chunk * world}, full.options());
  c.shard = from_full ? at::empty({chunk}, shard.options()) : at::zeros({chunk}, shard.options());
  if (from_full)
    c.full.narrow(0, 0, numel).copy_(full.view(-1));
  else
    c.shard.narrow(0, 0, shard.numel()).copy_(shard.view(-1));
  return c;
}

// Floating Avg is NCCL's own (ncclAvg); integer Avg is a Sum divided afterwards, truncating toward
// zero as the contract and the Gloo communicator do.
c10d::ReduceOp to_c10d(ReduceOp op, at::ScalarType dtype) {
  switch (op) {
    case ReduceOp::Max: return c10d::ReduceOp(c10d::ReduceOp::MAX);
    case ReduceOp::Avg:
      return at::isFloatingType(dtype) ? c10d::ReduceOp(c10d::ReduceOp::AVG) : c10d::ReduceOp(c10d::ReduceOp::SUM);
    case ReduceOp::Sum: break;
  }
  return c10d::ReduceOp(c10d::ReduceOp::SUM);
}

bool integer_average(ReduceOp op, const at::Tensor& t) { return op == ReduceOp::Avg && !at::isFloatingType(t.scalar_type()); }


class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(c10::intrusive_ptr<c10d::ProcessGroupNCCL> backend, std::chrono::milliseconds timeout,
                   at::Device device, c10::intrusive_ptr<c10d::Store> store, std::string store_prefix)
      : backend_(std::move(backend)),
        rank_(backend_->getRank()),
        size_(backend_->getSize()),
        timeout_(timeout),
        device_(device),
        store_(std::move(store)),
        store_prefix_(std::move(store_prefix)),
        local_only_(size_ == 1 && !nccl_issues_at_world_one()),
        pad_one_more_(size_ == 1 && !local_only_) {}

  // A normal exit tears the NCCL communicators down (torch warns about a backend destroyed
  // without shutdown); a failure here must not hide the error that ended the run.
  ~NcclCommunicator() override {
    try {
      backend_->shutdown();
    } catch (...) {
    }
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend_name() const override { return "nccl"; }
  std::chrono::milliseconds timeout() const override { return timeout_; }
  at::Device device() const override { return device_; }

  WorkPtr all_reduce(at::Tensor tensor, ReduceOp op) override {
    check_all_reduce_args(tensor, rank_, size_, device_);
    stats_.record(CollectiveKind::AllReduce, tensor_bytes(tensor));
    if (local_only_ || tensor.numel() == 0) return completed_work();
    std::vector<at::Tensor> tensors{tensor};
    c10d::AllreduceOptions opts;
    opts.reduceOp = to_c10d(op, tensor.scalar_type());
    opts.timeout = timeout_;
    std::function<void()> finish;
    if (integer_average(op, tensor)) finish = [tensor, world = size_]() mutable { finish_average(tensor, world); };
    return issue("all_reduce", [&] { return backend_->allreduce(tensors, opts); }, std::move(finish));
  }

  WorkPtr reduce_scatter(at::Tensor input, at::Tensor output, ReduceOp op) override {
    const ShardRange shard = check_reduce_scatter_args(input, output, rank_, size_, device_);
    stats_.record(CollectiveKind::ReduceScatter, tensor_bytes(input));
    const int64_t numel = input.numel();
    if (local_only_ || numel == 0) {
      output.view(-1).copy_(input.view(-1));
      return completed_work();
    }
    const EqualChunks c = equal_chunks(input, output, size_, /*from_full=*/true, pad_one_more_);
    c10d::ReduceScatterOptions opts;
    opts.reduceOp = to_c10d(op, input.scalar_type());
    opts.timeout = timeout_;
    std::function<void()> finish;
    if (c.padded || integer_average(op, input)) {
      finish = [output, recv = c.shard, padded = c.padded, average = integer_average(op, input), n = shard.size(),
                world = size_]() mutable {
        if (padded) output.view(-1).copy_(recv.narrow(0, 0, n));
        if (average) finish_average(output, world);
      };
    }
    at::Tensor recv = c.shard, send = c.full;
    return issue("reduce_scatter", [&] { return backend_->_reduce_scatter_base(recv, send, opts); },
                 std::move(finish));
  }

  WorkPtr all_gather(at::Tensor input, at::Tensor output) override {
    check_all_gather_args(input, output, rank_, size_, device_);
    stats_.record(CollectiveKind::AllGather, tensor_bytes(output));
    const int64_t numel = output.numel();
    if (local_only_ || numel == 0) {
      output.view(-1).copy_(input.view(-1));
      return completed_work();
    }
    const EqualChunks c = equal_chunks(output, input, size_, /*from_full=*/false, pad_one_more_);
    at::Tensor recv = c.full, send = c.shard;
    c10d::AllgatherOptions opts;
    opts.timeout = timeout_;
    std::function<void()> finish;
    // shard_range places rank r's shard at r * chunk: the unpadded result is the padded one's front.
    if (c.padded) finish = [output, recv, numel]() mutable { output.view(-1).copy_(recv.narrow(0, 0, numel)); };
    return issue("all_gather", [&] { return backend_->_allgather_base(recv, send, opts); }, std::move(finish));
  }

  WorkPtr broadcast(at::Tensor tensor, int root) override {
    check_broadcast_args(tensor, root, rank_, size_, device_);
    stats_.record(CollectiveKind::Broadcast, tensor_bytes(tensor));
    if (local_only_ || tensor.numel() == 0) return completed_work();
    std::vector<at::Tensor> tensors{tensor};
    c10d::BroadcastOptions opts;
    opts.rootRank = root;
    opts.timeout = timeout_;
    return issue("broadcast", [&] { return backend_->broadcast(tensors, opts); }, nullptr);
  }

  WorkPtr barrier() override {
    stats_.record(CollectiveKind::Barrier, 0);
    if (local_only_) return completed_work();
    c10d::BarrierOptions opts;
    opts.timeout = timeout_;
    opts.device_ids = {device_.index()};
    return issue("barrier", [&] { return backend_->barrier(opts); }, nullptr);
  }

  // A group is a fresh NCCL communicator among its members (ncclCommInitRank under a prefix
  // unique to this split and color), not ncclCommSplit: the same path as the world's, and it needs
  // no member list beyond what the color exchange gives.
  std::unique_ptr<Communicator> split(int color) override {
    const SplitGroup g = exchange_split_colors(*this, color);
    return connect_nccl(store_, g.rank, g.size, timeout_, device_.index(),
                                  store_prefix_ + "/split" + std::to_string(g.sequence) + "/color" +
                                      std::to_string(g.color));
  }

 private:
  template <typename Issue>
  WorkPtr issue(const char* op, Issue&& call, std::function<void()> finish) {
    // Appended piece by piece: GCC 12 misreads the chain of temporaries of `std::string(op) + ...`
    // here as a copy past a string's end (-Warray-bounds).
    std::string what = op;
    what.append(" on ").append(rank_of_world(rank_, size_)).append(" (nccl, ").append(device_.str()).append(")");
    try {
      return std::make_shared<NcclWork>(call(), what, std::move(finish));
    } catch (const std::exception& e) {
      throw CommError(what + " failed to start: " + exception_text(e));
    }
  }

  c10::intrusive_ptr<c10d::ProcessGroupNCCL> backend_;
  const int rank_;
  const int size_;
  const std::chrono::milliseconds timeout_;
  const at::Device device_;
  const c10::intrusive_ptr<c10d::Store> store_;
  const std::string store_prefix_;
  const bool local_only_;    // a world of one without the test switch: nothing is sent
  const bool pad_one_more_;  // a world of one with it: every chunk padded (equal_chunks)
};

}  // namespace

std::unique_ptr<Communicator> connect_nccl(c10::intrusive_ptr<c10d::Store> store, int rank, int size,
                                           std::chrono::milliseconds timeout, int device_index,
                                           const std::string& store_prefix) {
  if (size < 1 || rank < 0 || rank >= size) {
    throw CommError("nccl communicator: rank " + std::to_string(rank) + " is out of range for world size " +
                    std::to_string(size));
  }
  const at::Device device(at::kCUDA, static_cast<c10::DeviceIndex>(device_index));
  const std::string where = "nccl communicator setup on " + rank_of_world(rank, size) + " (" + device.str() + ")";
  if (!store) throw CommError(where + ": the c10d store is null");
  if (timeout.count() <= 0) {
    throw CommError(where + ": timeout must be positive, got " + std::to_string(timeout.count()) + " ms");
  }
  try {
    c10::cuda::CUDAGuard on_device(device);
    auto options = c10d::ProcessGroupNCCL::Options::create();
    options->timeout = timeout;
    auto backend = c10::make_intrusive<c10d::ProcessGroupNCCL>(
        c10::make_intrusive<c10d::PrefixStore>(store_prefix, store), rank, size, options);
    // Bound and connected now, so a missing peer fails here rather than in the first collective,
    // and later groups may be formed from this one's device.
    backend->setBoundDeviceId(device);
    backend->eagerConnectSingleDevice(device);
    return std::make_unique<NcclCommunicator>(std::move(backend), timeout, device, std::move(store), store_prefix);
  } catch (const CommError&) {
    throw;
  } catch (const std::exception& e) {
    throw CommError(where + " failed (store prefix '" + store_prefix + "', timeout " +
                    std::to_string(timeout.count()) + " ms): " + exception_text(e));
  }
}

#endif

}  // namespace accel::comm

// The plugin's entry point (cuda_plugin.hpp): the only symbol libaccel_cuda.so exports.
extern "C" __attribute__((visibility("default"))) void accel_cuda_plugin(accel::comm::CudaPluginApi* api) {
  api->abi = accel::comm::kCudaPluginAbi;
#if defined(ACCEL_WITH_NCCL)
  api->nccl_built = true;
  api->make_nccl = &accel::comm::connect_nccl;
#else
  api->nccl_built = false;
  api->make_nccl = nullptr;
#endif
}
