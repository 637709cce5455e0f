// GlooCommunicator: the Communicator over libtorch's own Gloo backend (c10d::ProcessGroupGloo, used
// through the c10d::Backend interface; gloo_backend.hpp). all_reduce, broadcast and barrier are the
// backend's collectives; reduce_scatter and all_gather are accel's rings over its point-to-point
// send/recv (ring_collectives.hpp), since the backend's own reduce-scatter moves twice the bytes.
// Invariants: arguments are checked and the op counted on the issuing thread; the op itself runs on
// the OpQueue worker, which waits for the backend with the communicator timeout, so ops complete in
// issue order and every P2P tag is identical on every rank; Gloo's threads run with SIGPIPE blocked,
// so a peer that vanishes mid-op is an error on this rank, never a killed process.
// When every rank can open one shared-memory segment (one host), all_reduce, reduce_scatter and
// all_gather go through it instead of TCP (shm_collectives.hpp, docs/design/0020); the choice is
// made once, at setup, by all ranks together.
#include "runtime/comm/gloo_communicator.hpp"

#include <pthread.h>
#include <signal.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <sstream>
#include <stdexcept>

#include "runtime/comm/flight_registry.hpp"
#include "runtime/comm/gloo_backend.hpp"
#include "runtime/comm/op_checks.hpp"
#include "runtime/comm/op_queue.hpp"
#include "runtime/comm/reduce_kernels.hpp"
#include "runtime/comm/ring_collectives.hpp"
#include "runtime/comm/shard_layout.hpp"
#include "runtime/comm/shm_collectives.hpp"
#include "runtime/common/errors.hpp"
#include "runtime/common/log.hpp"
#include "runtime/common/sealed_value.hpp"

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

std::vector<int64_t> shard_counts(int64_t numel, int world) {
  std::vector<int64_t> counts(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) counts[r] = shard_range(numel, world, r).size();
  return counts;
}

// ProcessGroupGloo::enqueue records every collective in torch's process-wide FlightRecorder, which
// inserts a new group's status into a shared map before taking its lock (torch 2.11). Two groups in
// one process (HYBRID_SHARD's splits, or ranks as threads in tests) issuing at once then corrupt
// that map and crash; so collectives are issued one group at a time. Only the issue is serialized,
// never the wait.
std::mutex& backend_issue_mutex() {
  static std::mutex mutex;
  return mutex;
}

template <typename Issue>
c10::intrusive_ptr<c10d::Work> issue_serialized(Issue&& issue) {
  std::lock_guard<std::mutex> lock(backend_issue_mutex());
  return issue();
}

// Avg is reduced as Sum and divided once at the end (finish_average), as the ring kernels do.
c10d::ReduceOp to_c10d(ReduceOp op) {
  return op == ReduceOp::Max ? c10d::ReduceOp(c10d::ReduceOp::MAX) : c10d::ReduceOp(c10d::ReduceOp::SUM);
}

// make_gloo_communicator() for any group: the world, or a group split() forms.
std::unique_ptr<Communicator> make_gloo_group(c10::intrusive_ptr<c10d::Store> store, int rank, int size,
                                              std::chrono::milliseconds timeout, const std::string& bind_address,
                                              const std::string& store_prefix, FlightGroup group);

class GlooCommunicator final : public Communicator {
 public:
  // `store`, `bind_address` and `store_prefix` are kept to connect the groups split() forms.
  GlooCommunicator(c10::intrusive_ptr<c10d::Backend> backend, std::chrono::milliseconds timeout,
                   c10::intrusive_ptr<c10d::Store> store, std::string bind_address, std::string store_prefix,
                   std::unique_ptr<ShmCollectives> shm, FlightGroup group)
      : backend_(std::move(backend)),
        rank_(backend_->getRank()),
        size_(backend_->getSize()),
        timeout_(timeout),
        store_(std::move(store)),
        bind_address_(std::move(bind_address)),
        store_prefix_(std::move(store_prefix)),
        shm_(std::move(shm)),
        group_(std::move(group)),
        queue_(std::make_unique<OpQueue>(rank_, size_, open_flight_ring(group_))) {}

  // The queue goes first: queued ops are cancelled and the running one (bounded by the timeout)
  // finishes before the backend and its connections are torn down.
  ~GlooCommunicator() override { queue_->shutdown(); }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend_name() const override { return "gloo"; }
  std::string transport() const { return shm_ ? "gloo (shared memory)" : "gloo (tcp)"; }
  std::chrono::milliseconds timeout() const override { return timeout_; }

  WorkPtr all_reduce(at::Tensor tensor, ReduceOp op) override {
    check_all_reduce_args(tensor, rank_, size_);
    stats_.record(CollectiveKind::AllReduce, tensor_bytes(tensor));
    return enqueue(flight_op("all_reduce", tensor), [this, tensor, op]() mutable {
      if (size_ > 1 && tensor.numel() > 0 && shm_) {
        on_shm([&] {
          shm_->all_reduce(tensor.data_ptr(), tensor.numel(), tensor.element_size(),
                           reduce_kernel(tensor.scalar_type(), op));
        });
      } else if (size_ > 1 && tensor.numel() > 0) {
        std::vector<at::Tensor> tensors{tensor};
        c10d::AllreduceOptions opts;
        opts.reduceOp = to_c10d(op);
        opts.timeout = timeout_;
        wait_for(issue_serialized([&] { return backend_->allreduce(tensors, opts); }));
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
    return enqueue(flight_op("reduce_scatter", input), [this, input, output, op, numel, shard, in_place]() mutable {
      if (size_ == 1 || numel == 0) {
        output.view(-1).copy_(input.view(-1));
      } else if (shm_) {
        // Reads `input` only, so no private copy: `output` may be a view of it (shm_collectives.hpp).
        on_shm([&] {
          shm_->reduce_scatter(input.data_ptr(), output.data_ptr(), numel, input.element_size(),
                               reduce_kernel(input.scalar_type(), op));
        });
      } else {
        at::Tensor accumulator = in_place ? input.view(-1) : input.reshape(-1).clone();
        ring_reduce_scatter(ring_args(numel), accumulator, reduce_kernel(input.scalar_type(), op));
        output.view(-1).copy_(accumulator.narrow(0, shard.begin, shard.size()));
      }
      if (op == ReduceOp::Avg) finish_average(output, size_);
    });
  }

  WorkPtr all_gather(at::Tensor input, at::Tensor output) override {
    const ShardRange shard = check_all_gather_args(input, output, rank_, size_);
    const int64_t numel = output.numel();
    stats_.record(CollectiveKind::AllGather, tensor_bytes(output));
    return enqueue(flight_op("all_gather", output), [this, input, output, numel, shard]() mutable {
      // Place our shard first; the ring then fills the others in place. A no-op copy when `input`
      // is already that slice of `output`.
      output.view(-1).narrow(0, shard.begin, shard.size()).copy_(input.view(-1));
      if (size_ == 1 || numel == 0) return;
      if (shm_) {
        on_shm([&] { shm_->all_gather(output.data_ptr(), numel, output.element_size()); });
        return;
      }
      ring_all_gather(ring_args(numel), output.view(-1));
    });
  }

  WorkPtr broadcast(at::Tensor tensor, int root) override {
    check_broadcast_args(tensor, root, rank_, size_);
    stats_.record(CollectiveKind::Broadcast, tensor_bytes(tensor));
    return enqueue(flight_op("broadcast", tensor, root), [this, tensor, root]() mutable {
      if (size_ == 1 || tensor.numel() == 0) return;
      std::vector<at::Tensor> tensors{tensor};
      c10d::BroadcastOptions opts;
      opts.rootRank = root;
      opts.timeout = timeout_;
      wait_for(issue_serialized([&] { return backend_->broadcast(tensors, opts); }));
    });
  }

  // A group is a fresh Gloo backend among its members, rendezvousing under a prefix unique to
  // this split and color (the parent's prefix is fresh per launch attempt, so these are too).
  std::unique_ptr<Communicator> split(int color) override {
    const SplitGroup g = exchange_split_colors(*this, color);
    FlightGroup group;
    group.name = group_.name + "/split" + std::to_string(g.sequence) + "/color" + std::to_string(g.color);
    for (int parent_rank : g.members)
      group.members.push_back(parent_rank < static_cast<int>(group_.members.size()) ? group_.members[parent_rank]
                                                                                  : parent_rank);
    group.group_rank = g.rank;
    group.timeout_ms = timeout_.count();
    const std::string name = group.name;
    std::string members;
    for (int r : group.members) members += (members.empty() ? "" : ", ") + std::to_string(r);
    auto made = make_gloo_group(store_, g.rank, g.size, timeout_, bind_address_,
                                store_prefix_ + "/split" + std::to_string(g.sequence) + "/color" +
                                    std::to_string(g.color),
                                std::move(group));
    // Which transport each group took (shared memory when all its ranks share a host, else TCP):
    // one line, in the log of the group's first rank, as the world's is in rank 0's.
    if (g.rank == 0 && g.size > 1)
      logging::info("accel: group " + name + " (ranks " + members + ") collectives over " +
                    static_cast<GlooCommunicator&>(*made).transport());
    return made;
  }

  WorkPtr barrier() override {
    stats_.record(CollectiveKind::Barrier, 0);
    return enqueue(FlightOp{"barrier"}, [this]() {
      if (size_ == 1) return;
      c10d::BarrierOptions opts;
      opts.timeout = timeout_;
      wait_for(issue_serialized([&] { return backend_->barrier(opts); }));
    });
  }

 private:
  // Runs `fn` on the worker; torch's exceptions become CommErrors naming op, rank, world, timeout.
  template <typename Fn>
  WorkPtr enqueue(FlightOp record, Fn fn) {
    const char* op = record.op;
    return queue_->submit(record, [this, op, fn = std::move(fn)]() mutable {
      try {
        fn();
      } catch (const CommError&) {
        throw;
      } catch (const std::exception& e) {
        throw CommError(describe_failure(op, exception_text(e)));
      }
    });
  }

  // A failed shared-memory op marks the segment failed, so peers stop waiting for this rank.
  template <typename Fn>
  void on_shm(Fn&& fn) {
    try {
      fn();
    } catch (const std::exception& e) {
      shm_->mark_failed("rank " + std::to_string(rank_) + ": " + e.what());  // no-op when a barrier already did
      throw;
    }
  }

  void wait_for(const c10::intrusive_ptr<c10d::Work>& work) const {
    if (!work->wait(timeout_)) throw std::runtime_error("the backend aborted the operation");
  }

  // Point-to-point tags for one ring collective: a fresh, identical range on every rank (the worker
  // thread runs ops in issue order). Wraps well below INT_MAX.
  RingArgs ring_args(int64_t numel) {
    RingArgs args;
    args.backend = backend_.get();
    args.counts = shard_counts(numel, size_);
    args.timeout = timeout_;
    if (next_tag_ > (1 << 30)) next_tag_ = 0;
    args.first_tag = next_tag_;
    next_tag_ += ring_tags(size_);
    return args;
  }

  std::string describe_failure(const char* op, const std::string& what) const {
    std::ostringstream msg;
    msg << op << " on " << rank_of_world(rank_, size_) << " (gloo): ";
    const bool timed_out = what.find("Timed out") != std::string::npos ||
                           what.find("timed out") != std::string::npos;
    if (timed_out) {
      msg << "timed out after " << timeout_.count()
          << " ms waiting for a peer rank: a peer is hung, stopped or slower than collective_timeout_s, or the "
             "ranks issued different collectives (every rank must issue the same ones in the same order)";
    } else {
      msg << "failed (timeout " << timeout_.count() << " ms); a peer rank may have failed or exited";
    }
    const bool from_shm = what.rfind("shared memory: ", 0) == 0;  // ShmCollectives' text names itself
    msg << (from_shm ? ". " : ". Gloo: ") << what;
    return msg.str();
  }

  c10::intrusive_ptr<c10d::Backend> backend_;
  const int rank_;
  const int size_;
  const std::chrono::milliseconds timeout_;
  const c10::intrusive_ptr<c10d::Store> store_;
  const std::string bind_address_;
  const std::string store_prefix_;
  int next_tag_ = 0;  // touched only by the worker thread
  std::unique_ptr<ShmCollectives> shm_;  // null: every op over TCP
  const FlightGroup group_;              // what the flight records call this group
  std::unique_ptr<OpQueue> queue_;
};

bool shared_memory_disabled() {
  const char* flag = std::getenv("ACCEL_SHM_DISABLE");
  return flag != nullptr && *flag != '\0' && std::strcmp(flag, "0") != 0;
}

// Every rank's answer to "could you open the segment?", reduced with MIN over Gloo: true only when
// all could, so all ranks take the same transport.
bool all_ranks_agree(c10d::Backend& backend, bool ok, std::chrono::milliseconds timeout) {
  std::vector<at::Tensor> flag{at::full({1}, ok ? 1 : 0, at::kInt)};
  c10d::AllreduceOptions opts;
  opts.reduceOp = c10d::ReduceOp(c10d::ReduceOp::MIN);
  opts.timeout = timeout;
  auto work = issue_serialized([&] { return backend.allreduce(flag, opts); });
  if (!work->wait(timeout)) throw std::runtime_error("the backend aborted the shared-memory agreement");
  return flag[0].item<int>() == 1;
}

// Rank 0 creates the segment and publishes its descriptor under `prefix`; the others attach. Null
// when any rank could not (another host, no room in /dev/shm, ACCEL_SHM_DISABLE): then TCP. The
// descriptor is sealed under the job secret (runtime/common/sealed_value.hpp): one another process
// wrote, or a segment that is not this user's and private, throws, and the job ends naming it,
// never attaching it and never falling back to TCP without a word.
std::unique_ptr<ShmCollectives> connect_shared_memory(const c10::intrusive_ptr<c10d::Store>& store,
                                                      const std::string& prefix, c10d::Backend& backend, int rank,
                                                      int size, std::chrono::milliseconds timeout) {
  if (size < 2) return nullptr;
  // A rank with ACCEL_SHM_DISABLE set still takes part (and says no), so ranks whose environments
  // differ still issue the same store and Gloo operations.
  const bool wanted = !shared_memory_disabled();
  c10d::PrefixStore shm_store(prefix + "/shm", store);
  const std::string key = prefix + "/shm/segment";  // its full name, for the MAC and messages
  std::unique_ptr<ShmCollectives> shm;
  try {
    if (rank == 0) {
      std::string descriptor = "-";  // "-": the others need not try
      try {
        if (wanted) {
          shm = ShmCollectives::create(size, timeout);
          descriptor = shm->descriptor();
        }
      } catch (const std::exception&) {
      }
      const std::string value = secret::seal(key, descriptor);
      shm_store.set("segment", std::vector<uint8_t>(value.begin(), value.end()));
    } else {
      const std::vector<uint8_t> value = shm_store.get("segment");
      const std::string descriptor = secret::unseal(key, std::string(value.begin(), value.end()));
      try {
        if (wanted && descriptor != "-") shm = ShmCollectives::attach(descriptor, rank, size, timeout);
      } catch (const ShmNotHere&) {  // rank 0 is on another host: TCP, as the agreement below says
      } catch (const std::exception& e) {
        throw CommError("rank " + std::to_string(rank) + " cannot use the shared-memory segment rank 0 described "
                        "under " + key + ": " + e.what());
      }
    }
  } catch (const CommError&) {
    throw;
  } catch (const RunError&) {  // unseal(): a descriptor another process wrote
    throw;
  } catch (const std::exception&) {
    shm.reset();  // this rank says no below; the store's own failure surfaces in the agreement
  }
  const bool everyone = all_ranks_agree(backend, shm != nullptr, timeout);
  if (shm && rank == 0) shm->unlink_name();  // every rank has opened it or given up: nothing stays in /dev/shm
  return everyone ? std::move(shm) : nullptr;
}

std::unique_ptr<Communicator> make_gloo_group(c10::intrusive_ptr<c10d::Store> store, int rank, int size,
                                              std::chrono::milliseconds timeout, const std::string& bind_address,
                                              const std::string& store_prefix, FlightGroup group) {
  if (size < 1 || rank < 0 || rank >= size) {
    throw CommError("gloo communicator: rank " + std::to_string(rank) + " is out of range for world size " +
                    std::to_string(size));
  }
  const std::string where = "gloo communicator setup on " + rank_of_world(rank, size);
  if (!store) throw CommError(where + ": the c10d store is null");
  if (timeout.count() <= 0) {
    throw CommError(where + ": timeout must be positive, got " + std::to_string(timeout.count()) + " ms");
  }
  ScopedSigpipeBlock no_sigpipe;  // Gloo's loop thread and its workers inherit the blocked mask
  c10::intrusive_ptr<c10d::Backend> backend;
  try {
    GlooBackendOptions options;
    options.rank = rank;
    options.size = size;
    options.timeout = timeout;
    options.bind_address = bind_address;
    backend = make_gloo_backend(c10::make_intrusive<c10d::PrefixStore>(store_prefix, store), options);
  } catch (const std::exception& e) {
    throw CommError(where + " failed (bind address '" + bind_address + "', store prefix '" + store_prefix +
                    "', timeout " + std::to_string(timeout.count()) + " ms): " + exception_text(e));
  }
  std::unique_ptr<ShmCollectives> shm;
  try {
    shm = connect_shared_memory(store, store_prefix, *backend, rank, size, timeout);
  } catch (const std::exception& e) {
    throw CommError(where + ": agreeing on shared memory failed (timeout " + std::to_string(timeout.count()) +
                    " ms): " + exception_text(e));
  }
  return std::make_unique<GlooCommunicator>(std::move(backend), timeout, std::move(store), bind_address, store_prefix,
                                            std::move(shm), std::move(group));
}

}  // namespace

std::string transport_of(const Communicator& comm) {
  if (const auto* gloo = dynamic_cast<const GlooCommunicator*>(&comm)) return gloo->transport();
  return comm.backend_name();
}

std::unique_ptr<Communicator> make_gloo_communicator(c10::intrusive_ptr<c10d::Store> store, int rank, int size,
                                                     std::chrono::milliseconds timeout,
                                                     const std::string& bind_address,
                                                     const std::string& store_prefix) {
  // The world: its ranks are the global ranks.
  FlightGroup group;
  for (int r = 0; r < size; ++r) group.members.push_back(r);
  group.group_rank = rank;
  group.timeout_ms = timeout.count();
  return make_gloo_group(std::move(store), rank, size, timeout, bind_address, store_prefix, std::move(group));
}

}  // namespace accel::comm
