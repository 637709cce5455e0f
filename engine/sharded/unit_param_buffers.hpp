// The gathered (full) parameter buffers of a sharding engine's units and their schedule: when a
// unit's all-gather is issued, waited on and its storage freed, with prefetch and live limits.
// Each unit's model parameters are views of its flat buffer `full` [P]; a gather fills it from every
// rank's shard (`source`, this rank's [S] piece in the compute dtype; for a unit that keeps its
// storage it may be this rank's slice of `full` itself, gathered in place). A unit is
//   released  (not valid; storage freed unless the unit keeps its storage),
//   in flight (all-gather issued, not waited on), or
//   ready     (valid for compute).
// Units that keep storage are never freed: replicated parameters (ZeRO 1-2) and, in ZeRO-3, units
// below the persistence threshold; they are re-gathered after each optimizer step.
// Prefetch is a pure function of the schedule (never of timing), so every rank issues the same
// collectives in the same order. The live limits count units that free their storage and are not
// pinned (the token-input unit, kept gathered through a micro-step like FSDP's root); the unit about
// to compute is always gathered, only prefetches are skipped when a limit would be exceeded.
// Staged units (parameter offload) keep no shard on the device: issuing the gather reads the shard
// from a ShardSource (a file into one of its capacity() staging buffers, or host memory), copied
// to the gather's device when it is elsewhere, and held until the gather completes. When
// every buffer is held, the oldest staged gather is completed first (a local wait: the collectives
// issued, and their order, do not change).
#pragma once

#include <ATen/ATen.h>

#include <deque>
#include <string>
#include <vector>

#include "engine/sharded/prefetch_policy.hpp"
#include "engine/sharded/unit_trace.hpp"
#include "runtime/comm/communicator.hpp"

namespace accel::engine {

// Where staged units' shards come from (nvme_param_store.hpp): stage(unit) returns the shard in a
// staging buffer, one of at most capacity() held at once; unstage(unit) gives the buffer back.
class ShardSource {
 public:
  virtual ~ShardSource() = default;
  virtual int capacity() const = 0;
  virtual at::Tensor stage(int unit) = 0;
  virtual void unstage(int unit) = 0;
};

class UnitParamBuffers {
 public:
  UnitParamBuffers(comm::Communicator& comm, PrefetchPolicy policy);

  // `full` holds the unit's gathered parameters now; `source` is this rank's shard to gather from.
  int add_unit(std::string name, at::Tensor full, at::Tensor source, bool keeps_storage);
  // A unit that frees its storage and whose shard is unit `source_unit` of the shard source.
  int add_staged_unit(std::string name, at::Tensor full, int source_unit);
  void set_shard_source(ShardSource* source) { shard_source_ = source; }
  void set_trace(UnitTrace* trace) { trace_ = trace; }
  void set_pinned(int u, bool pinned) { units_[size_t(u)].pinned = pinned; }
  bool keeps_storage(int u) const { return units_[size_t(u)].keeps_storage; }
  int size() const { return int(units_.size()); }

  void issue(int u);       // starts the all-gather unless the unit is in flight or ready
  void wait(int u);        // makes the unit ready (issuing its gather first if needed)
  void finish(int u);      // completes the unit's gather in flight, if any (issues none)
  void release(int u);     // frees the unit's storage (units that keep storage: no-op)
  void release_all();      // unpins and releases every unit
  void invalidate_all();   // after the optimizer step: every unit's content is stale
  // Prefetches from unit u in direction +1 (forward order) or -1 (backward order), within limits.
  void prefetch_from(int u, int direction);

  int live_units() const;        // counted units in flight or ready
  // Bytes of gathered storage held by units that free theirs (pinned included), now and at peak.
  int64_t transient_bytes() const;
  int64_t peak_transient_bytes() const { return peak_transient_bytes_; }
  int64_t kept_bytes() const;    // storage of the units that keep theirs (replicated parameters)
  int64_t live_numel() const;

 private:
  enum class State { released, in_flight, ready };
  struct Entry {
    std::string name;
    at::Tensor full, source;
    int source_unit = -1;  // staged: the unit's index in the shard source (else -1)
    at::Tensor staged;     // staged and in flight: the staging buffer the gather reads
    bool keeps_storage = false;
    bool pinned = false;
    State state = State::ready;
    comm::WorkPtr work;
  };
  bool counted(const Entry& e) const { return !e.keeps_storage && !e.pinned; }
  void note(TraceEvent event, const Entry& e) {
    if (trace_) trace_->record(event, e.name);
  }

  void unstage(Entry& e);

  comm::Communicator& comm_;
  PrefetchPolicy policy_;
  UnitTrace* trace_ = nullptr;
  ShardSource* shard_source_ = nullptr;
  std::vector<Entry> units_;
  std::deque<int> staged_in_flight_;  // units holding a staging buffer, oldest first
  int64_t peak_transient_bytes_ = 0;
};

}  // namespace accel::engine
