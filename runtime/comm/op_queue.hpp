// The ordered executor behind every asynchronous Communicator op: one background thread per
// communicator runs ops in issue order and completes their Work handles.
// Invariants: ops run one at a time, FIFO; after the first failure every later op fails fast with a
// CommError that quotes it (a collective stream that lost step with its peers cannot be trusted);
// shutdown cancels ops that have not started and waits only for the running one.
// With a FlightRing the queue records every op it runs (docs/design/0025): numbered at issue,
// written when it starts and ends, and the process's records dumped at its first failure, before
// the failed Work completes.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "runtime/comm/communicator.hpp"
#include "runtime/comm/flight_ring.hpp"

namespace accel::comm {

class QueuedWork;

class OpQueue {
 public:
  // `rank` and `world` name the owner in messages ("<op> on rank r of w: ..."); `ring` (null: no
  // recording) receives a record of every op run.
  OpQueue(int rank, int world, std::shared_ptr<FlightRing> ring = nullptr);
  ~OpQueue();
  OpQueue(const OpQueue&) = delete;
  OpQueue& operator=(const OpQueue&) = delete;

  // Queues `fn` as op `op` ("all_reduce", ...). `fn` reports failure by throwing: a CommError keeps
  // its message; any other exception is wrapped as "<op> on rank r of w: <what>".
  // `op` carries what the flight record says of it (flight_op()); submit(const char*) records only the name.
  WorkPtr submit(FlightOp op, std::function<void()> fn);
  WorkPtr submit(const char* op, std::function<void()> fn) { return submit(FlightOp{op}, std::move(fn)); }

  // The ring this queue records into, or null.
  const std::shared_ptr<FlightRing>& flight_ring() const { return ring_; }

  // Cancels the ops not yet started (their Work fails with CommError) and joins the worker.
  // Idempotent; the destructor calls it. Closes the flight ring (close_flight_ring).
  void shutdown();

 private:
  struct Item {
    FlightOp op;
    std::function<void()> fn;
    std::shared_ptr<QueuedWork> work;
  };

  void run();

  const int rank_;
  const int world_;
  const std::shared_ptr<FlightRing> ring_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Item> items_;
  bool stopping_ = false;
  std::string first_failure_;  // empty while healthy; touched only by the worker thread
  std::thread worker_;
};

// The flight record of an op on `t` (its dtype, element count and bytes), `root` for a broadcast.
FlightOp flight_op(const char* op, const at::Tensor& t, int root = -1);

}  // namespace accel::comm
