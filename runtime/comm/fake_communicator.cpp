// FakeWorld and its communicators: collectives over shared memory between threads of one process.
// Each collective is a numbered round: every rank deposits a copy of its input, waits (up to the
// timeout) until all ranks have arrived, then computes its own output from the deposits.
// Invariants: deposits are private copies, immutable once the round is complete, so in-place ops
// never race with a peer still reading; a round that failed (timeout or mismatch) fails every
// rank that reaches it; reductions run in rank order with the same kernels as the Gloo backend.
#include "runtime/comm/fake_communicator.hpp"

#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <sstream>
#include <vector>

#include "runtime/comm/flight_registry.hpp"
#include "runtime/comm/op_checks.hpp"
#include "runtime/comm/op_queue.hpp"
#include "runtime/comm/reduce_kernels.hpp"
#include "runtime/comm/shard_layout.hpp"

namespace accel::comm {
namespace detail {

// What one rank brought to a round: the op's signature (which must match across ranks) and data.
struct Deposit {
  CollectiveKind kind = CollectiveKind::Barrier;
  ReduceOp op = ReduceOp::Sum;
  int root = 0;
  int64_t numel = 0;  // of the full buffer
  at::ScalarType dtype = at::kFloat;
  at::Tensor data;  // a private flat copy; undefined when the op needs no data from this rank

  std::string signature() const {
    std::ostringstream s;
    s << to_string(kind);
    if (kind == CollectiveKind::Barrier) return s.str();
    s << "(";
    if (kind == CollectiveKind::AllReduce || kind == CollectiveKind::ReduceScatter) s << to_string(op) << ", ";
    if (kind == CollectiveKind::Broadcast) s << "root " << root << ", ";
    s << dtype_name(dtype) << ", " << numel << " elements)";
    return s.str();
  }
};

struct Round {
  explicit Round(int world) : deposits(static_cast<size_t>(world)), present(static_cast<size_t>(world), false) {}
  std::vector<Deposit> deposits;
  std::vector<bool> present;
  int arrived = 0;
  int departed = 0;
  std::string failure;  // set once by the rank that detected a timeout or mismatch
};

class FakeWorldState {
 public:
  FakeWorldState(int size, std::chrono::milliseconds timeout)
      : size_(size), timeout_(timeout), claimed_(static_cast<size_t>(size), false) {}

  int size() const { return size_; }
  std::chrono::milliseconds timeout() const { return timeout_; }

  void claim(int rank) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (rank < 0 || rank >= size_) {
      throw CommError("FakeWorld::communicator: rank " + std::to_string(rank) + " is out of range [0, " +
                      std::to_string(size_) + ")");
    }
    if (claimed_[rank]) {
      throw CommError("FakeWorld::communicator: rank " + std::to_string(rank) +
                      " already has a communicator; each rank gets exactly one");
    }
    claimed_[rank] = true;
  }

  // Deposits `mine` for round `seq` and blocks until every rank has deposited. Returns the complete
  // round; throws CommError on timeout, on a signature mismatch, or when a peer failed the round.
  std::shared_ptr<Round> exchange(int64_t seq, int rank, Deposit mine) {
    const std::string prefix = std::string(to_string(mine.kind)) + " on " + rank_of_world(rank, size_) + " (fake): ";
    std::unique_lock<std::mutex> lock(mutex_);
    auto& slot = rounds_[seq];
    if (!slot) slot = std::make_shared<Round>(size_);
    std::shared_ptr<Round> round = slot;
    if (!round->failure.empty()) throw CommError(prefix + "collective #" + std::to_string(seq) + " already failed: " + round->failure);
    for (int q = 0; q < size_; ++q) {
      if (!round->present[q]) continue;
      const std::string theirs = round->deposits[q].signature();
      if (theirs != mine.signature()) {
        round->failure = "collective #" + std::to_string(seq) + " mismatch: rank " + std::to_string(q) + " issued " +
                         theirs + " but rank " + std::to_string(rank) + " issued " + mine.signature() +
                         "; every rank must issue the same collectives in the same order";
        cv_.notify_all();
        throw CommError(prefix + round->failure);
      }
      break;  // every present deposit already matched the first one
    }
    round->deposits[rank] = std::move(mine);
    round->present[rank] = true;
    if (++round->arrived == size_) cv_.notify_all();

    const auto deadline = std::chrono::steady_clock::now() + timeout_;
    while (round->arrived < size_ && round->failure.empty()) {
      if (cv_.wait_until(lock, deadline) != std::cv_status::timeout) continue;
      if (round->arrived == size_ || !round->failure.empty()) break;
      std::string missing;
      for (int q = 0; q < size_; ++q) {
        if (!round->present[q]) missing += (missing.empty() ? "" : ", ") + std::to_string(q);
      }
      round->failure = prefix + "timed out after " + std::to_string(timeout_.count()) + " ms waiting for rank(s) " +
                       missing + " to issue collective #" + std::to_string(seq) +
                       "; every rank must issue the same collectives in the same order";
      cv_.notify_all();
      throw CommError(round->failure);
    }
    if (round->arrived < size_) {
      throw CommError(prefix + "collective #" + std::to_string(seq) + " failed on a peer: " + round->failure);
    }
    return round;
  }

  // The state of the group that split `sequence` forms for `color` (`size` ranks): made by the
  // first member to ask, shared by the others.
  std::shared_ptr<FakeWorldState> subgroup(int sequence, int color, int size) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto& group = subgroups_[{sequence, color}];
    if (!group) group = std::make_shared<FakeWorldState>(size, timeout_);
    return group;
  }

  // Called once per rank after it has read the round; the last one drops it.
  void depart(int64_t seq, const std::shared_ptr<Round>& round) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (++round->departed == size_) rounds_.erase(seq);
  }

 private:
  const int size_;
  const std::chrono::milliseconds timeout_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<bool> claimed_;
  std::map<int64_t, std::shared_ptr<Round>> rounds_;
  std::map<std::pair<int, int>, std::shared_ptr<FakeWorldState>> subgroups_;
};

}  // namespace detail

namespace {

using detail::Deposit;
using detail::FakeWorldState;
using detail::Round;

char* byte_ptr(const at::Tensor& t, int64_t element_offset) {
  return static_cast<char*>(t.data_ptr()) + element_offset * t.element_size();
}

// out[0, n) = reduction over ranks (in rank order) of deposits[q].data[begin, begin + n).
void reduce_deposits(const Round& round, int64_t begin, int64_t n, ReduceOp op, const at::Tensor& out) {
  if (n == 0) return;
  const ReduceFn fn = reduce_kernel(out.scalar_type(), op);
  const auto& first = round.deposits[0].data;
  std::memcpy(out.data_ptr(), byte_ptr(first, begin), static_cast<size_t>(n * out.element_size()));
  for (size_t q = 1; q < round.deposits.size(); ++q) {
    fn(out.data_ptr(), out.data_ptr(), byte_ptr(round.deposits[q].data, begin), static_cast<size_t>(n));
  }
}

class FakeCommunicator final : public Communicator {
 public:
  // `group` names it in the flight records (the world: every rank, named "world").
  FakeCommunicator(std::shared_ptr<FakeWorldState> world, int rank, FlightGroup group)
      : world_(std::move(world)),
        rank_(rank),
        size_(world_->size()),
        group_(std::move(group)),
        queue_(std::make_unique<OpQueue>(rank_, size_, open_flight_ring(group_))) {}
  ~FakeCommunicator() override { queue_->shutdown(); }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend_name() const override { return "fake"; }
  std::chrono::milliseconds timeout() const override { return world_->timeout(); }

  WorkPtr all_reduce(at::Tensor tensor, ReduceOp op) override {
    check_all_reduce_args(tensor, rank_, size_);
    stats_.record(CollectiveKind::AllReduce, tensor_bytes(tensor));
    Deposit d = signature(CollectiveKind::AllReduce, op, 0, tensor);
    return run(flight_op("all_reduce", tensor), std::move(d), tensor, [this, tensor, op](const Round& round) mutable {
      reduce_deposits(round, 0, tensor.numel(), op, tensor);
      if (op == ReduceOp::Avg) finish_average(tensor, size_);
    });
  }

  WorkPtr reduce_scatter(at::Tensor input, at::Tensor output, ReduceOp op) override {
    const ShardRange shard = check_reduce_scatter_args(input, output, rank_, size_);
    stats_.record(CollectiveKind::ReduceScatter, tensor_bytes(input));
    Deposit d = signature(CollectiveKind::ReduceScatter, op, 0, input);
    return run(flight_op("reduce_scatter", input), std::move(d), input, [this, output, op, shard](const Round& round) mutable {
      reduce_deposits(round, shard.begin, shard.size(), op, output);
      if (op == ReduceOp::Avg) finish_average(output, size_);
    });
  }

  WorkPtr all_gather(at::Tensor input, at::Tensor output) override {
    check_all_gather_args(input, output, rank_, size_);
    stats_.record(CollectiveKind::AllGather, tensor_bytes(output));
    Deposit d = signature(CollectiveKind::AllGather, ReduceOp::Sum, 0, output);
    return run(flight_op("all_gather", output), std::move(d), input, [this, output](const Round& round) {
      for (int q = 0; q < size_; ++q) {
        const ShardRange r = shard_range(output.numel(), size_, q);
        if (r.size() == 0) continue;
        std::memcpy(byte_ptr(output, r.begin), round.deposits[q].data.data_ptr(),
                    static_cast<size_t>(r.size() * output.element_size()));
      }
    });
  }

  WorkPtr broadcast(at::Tensor tensor, int root) override {
    check_broadcast_args(tensor, root, rank_, size_);
    stats_.record(CollectiveKind::Broadcast, tensor_bytes(tensor));
    Deposit d = signature(CollectiveKind::Broadcast, ReduceOp::Sum, root, tensor);
    at::Tensor payload = rank_ == root ? tensor : at::Tensor();
    return run(flight_op("broadcast", tensor, root), std::move(d), payload, [this, tensor, root](const Round& round) {
      if (rank_ == root || tensor.numel() == 0) return;
      std::memcpy(tensor.data_ptr(), round.deposits[root].data.data_ptr(),
                  static_cast<size_t>(tensor.numel() * tensor.element_size()));
    });
  }

  std::unique_ptr<Communicator> split(int color) override {
    const SplitGroup g = exchange_split_colors(*this, color);
    auto group = world_->subgroup(g.sequence, g.color, g.size);
    group->claim(g.rank);
    FlightGroup flight;
    flight.name = group_.name + "/split" + std::to_string(g.sequence) + "/color" + std::to_string(g.color);
    for (int parent_rank : g.members) flight.members.push_back(group_.members.at(static_cast<size_t>(parent_rank)));
    flight.group_rank = g.rank;
    flight.timeout_ms = group_.timeout_ms;
    return std::make_unique<FakeCommunicator>(std::move(group), g.rank, std::move(flight));
  }

  WorkPtr barrier() override {
    stats_.record(CollectiveKind::Barrier, 0);
    Deposit d;
    d.kind = CollectiveKind::Barrier;
    return run(FlightOp{"barrier"}, std::move(d), at::Tensor(), [](const Round&) {});
  }

 private:
  static Deposit signature(CollectiveKind kind, ReduceOp op, int root, const at::Tensor& full) {
    Deposit d;
    d.kind = kind;
    d.op = op;
    d.root = root;
    d.numel = full.numel();
    d.dtype = full.scalar_type();
    return d;
  }

  // Queues the round: deposit a copy of `payload` (taken when the op runs, like a real transport
  // reading the buffer), wait for the peers, then `finish` computes this rank's output.
  template <typename Finish>
  WorkPtr run(FlightOp op, Deposit deposit, at::Tensor payload, Finish finish) {
    return queue_->submit(op, [this, deposit = std::move(deposit), payload, finish]() mutable {
      const int64_t seq = next_seq_++;
      if (payload.defined()) deposit.data = payload.reshape(-1).clone();
      auto round = world_->exchange(seq, rank_, std::move(deposit));
      try {
        finish(*round);
      } catch (...) {
        world_->depart(seq, round);
        throw;
      }
      world_->depart(seq, round);
    });
  }

  std::shared_ptr<FakeWorldState> world_;
  const int rank_;
  const int size_;
  int64_t next_seq_ = 0;  // touched only by the worker thread
  const FlightGroup group_;
  std::unique_ptr<OpQueue> queue_;
};

}  // namespace

FakeWorld::FakeWorld(int size, std::chrono::milliseconds timeout) {
  if (size < 1) throw CommError("FakeWorld: size must be at least 1, got " + std::to_string(size));
  if (timeout.count() <= 0) {
    throw CommError("FakeWorld: timeout must be positive, got " + std::to_string(timeout.count()) + " ms");
  }
  state_ = std::make_shared<FakeWorldState>(size, timeout);
}

FakeWorld::~FakeWorld() = default;

int FakeWorld::size() const { return state_->size(); }
std::chrono::milliseconds FakeWorld::timeout() const { return state_->timeout(); }

std::unique_ptr<Communicator> FakeWorld::communicator(int rank) {
  state_->claim(rank);
  FlightGroup group;
  for (int r = 0; r < state_->size(); ++r) group.members.push_back(r);
  group.group_rank = rank;
  group.timeout_ms = state_->timeout().count();
  return std::make_unique<FakeCommunicator>(state_, rank, std::move(group));
}

}  // namespace accel::comm
