// FlightRing: the last ops one communicator ran, in a fixed ring of plain records (the collective
// flight recorder, docs/design/0025). The communicator's OpQueue numbers each op as it is issued and
// writes its record when the op starts and when it ends; any thread may copy the ring meanwhile.
// Invariants: one writer (the queue thread) per ring, no allocation and no lock per op; each slot is
// a seqlock (odd version while written, fields relaxed atomics), so a reader never uses a record
// torn by a concurrent write: it retries, and counts the slot as torn when every try failed.
// Torch-free.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/diag/flight_records.hpp"

namespace accel::comm {

// The communicator a ring belongs to.
struct FlightGroup {
  std::string name = "world";  // "world", "world/split0/color1"
  std::vector<int> members;    // global ranks in group-rank order
  int group_rank = 0;
  int64_t timeout_ms = 0;
};

// One op as it is issued: what the queue item carries to the ring. `op` and `dtype` point at
// string literals (static storage), so a record holds pointers, not copies.
struct FlightOp {
  const char* op = "";
  const char* dtype = "";
  int64_t count = 0;   // elements of the full buffer
  int64_t bytes = 0;
  int root = -1;
  uint64_t seq = 0;    // set by FlightRing::issue
  uint64_t order = 0;
  int64_t issued_ns = 0;
};

class FlightRing {
 public:
  static constexpr size_t kDefaultCapacity = 1024;

  explicit FlightRing(FlightGroup group, size_t capacity = kDefaultCapacity);
  ~FlightRing();
  FlightRing(const FlightRing&) = delete;
  FlightRing& operator=(const FlightRing&) = delete;

  // On the issuing thread: numbers `op` (in this group and over the process) and stamps its issue time.
  void issue(FlightOp& op);
  // On the queue thread only, in issue order: `op` starts (its record replaces the oldest) ...
  void start(const FlightOp& op);
  // ... and ends, with `ok` false when it failed.
  void finish(const FlightOp& op, bool ok);
  // The communicator is gone; the records stay readable.
  void close() { closed_.store(true, std::memory_order_relaxed); }
  bool closed() const { return closed_.load(std::memory_order_relaxed); }

  // Any thread: the ring's records, oldest first, and the group's facts.
  flight::GroupRecords snapshot() const;

  const FlightGroup& group() const { return group_; }
  size_t capacity() const { return capacity_; }

 private:
  struct Slot;
  Slot& slot_of(uint64_t seq) const;

  const FlightGroup group_;
  const size_t capacity_;
  std::unique_ptr<Slot[]> slots_;
  std::atomic<uint64_t> issued_{0};   // ops numbered so far (the issuing thread)
  std::atomic<uint64_t> started_{0};  // seq of the newest started op (the queue thread)
  std::atomic<bool> closed_{false};
};

}  // namespace accel::comm
