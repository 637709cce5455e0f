// OpQueue: the single worker thread that runs a communicator's ops in issue order, and the Work
// handle it completes. Invariant: every submitted Work completes exactly once (done, failed, or
// cancelled), so Work::wait() never blocks forever on an op the queue dropped.
#include "runtime/comm/op_queue.hpp"

#include <c10/core/GradMode.h>

#include "runtime/comm/flight_registry.hpp"
#include "runtime/comm/op_checks.hpp"

namespace accel::comm {

// Work for an op run by OpQueue: completed once by the worker, waited on by any thread.
class QueuedWork : public Work {
 public:
  void wait() override {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [&] { return done_; });
    if (!error_.empty()) throw CommError(error_);
  }

  bool is_completed() override {
    std::lock_guard<std::mutex> lock(mutex_);
    return done_;
  }

  void finish(std::string error) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (done_) return;
      done_ = true;
      error_ = std::move(error);
    }
    cv_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  std::string error_;  // empty on success
};

// Names as the flight records spell them (torch's own for the rare others); string literals, so a
// record keeps the pointer.
const char* flight_dtype_name(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return "float32";
    case at::kDouble: return "float64";
    case at::kHalf: return "float16";
    case at::kBFloat16: return "bfloat16";
    case at::kLong: return "int64";
    case at::kInt: return "int32";
    case at::kShort: return "int16";
    case at::kChar: return "int8";
    case at::kByte: return "uint8";
    case at::kBool: return "bool";
    default: return c10::toString(t);
  }
}

FlightOp flight_op(const char* op, const at::Tensor& t, int root) {
  FlightOp f;
  f.op = op;
  f.dtype = flight_dtype_name(t.scalar_type());
  f.count = t.numel();
  f.bytes = t.numel() * static_cast<int64_t>(t.element_size());
  f.root = root;
  return f;
}

OpQueue::OpQueue(int rank, int world, std::shared_ptr<FlightRing> ring)
    : rank_(rank), world_(world), ring_(std::move(ring)), worker_([this] { run(); }) {}

OpQueue::~OpQueue() { shutdown(); }

WorkPtr OpQueue::submit(FlightOp op, std::function<void()> fn) {
  auto work = std::make_shared<QueuedWork>();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!stopping_) {
      if (ring_) ring_->issue(op);
      items_.push_back(Item{op, std::move(fn), work});
      cv_.notify_all();
      return work;
    }
  }
  work->finish(std::string(op.op) + " on " + rank_of_world(rank_, world_) +
               ": the communicator is shutting down");
  return work;
}

void OpQueue::shutdown() {
  std::deque<Item> cancelled;
  bool was_stopping = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    was_stopping = stopping_;
    stopping_ = true;
    cancelled.swap(items_);
    cv_.notify_all();
  }
  for (auto& item : cancelled) {
    item.work->finish(std::string(item.op.op) + " on " + rank_of_world(rank_, world_) +
                      ": cancelled, the communicator was destroyed before the op started");
  }
  if (worker_.joinable() && worker_.get_id() != std::this_thread::get_id()) worker_.join();
  if (!was_stopping) close_flight_ring(ring_);
}

void OpQueue::run() {
  // Collectives move data; they never record autograd history, even on tensors that require grad
  // (e.g. all_gather into a flat parameter). Grad mode is thread-local, so set it once here.
  c10::NoGradGuard no_grad;
  for (;;) {
    Item item;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [&] { return stopping_ || !items_.empty(); });
      if (items_.empty()) return;  // stopping and drained
      item = std::move(items_.front());
      items_.pop_front();
    }
    const std::string prefix = std::string(item.op.op) + " on " + rank_of_world(rank_, world_) + ": ";
    if (!first_failure_.empty()) {
      item.work->finish(prefix + "not run because an earlier collective failed, so this rank is out of "
                                 "step with its peers; recreate the communicator. Earlier failure: " +
                        first_failure_);
      continue;
    }
    std::string error;
    if (ring_) ring_->start(item.op);
    try {
      item.fn();
    } catch (const CommError& e) {
      error = e.what();
    } catch (const std::exception& e) {
      error = prefix + e.what();
    } catch (...) {
      error = prefix + "unknown exception";
    }
    if (ring_) ring_->finish(item.op, error.empty());
    if (!error.empty()) {
      first_failure_ = error;
      // Before the caller learns of the failure (and may exit): the records of the op that failed.
      if (ring_) dump_flight_records("collective failed: " + error);
    }
    item.work->finish(std::move(error));
  }
}

}  // namespace accel::comm
