// ShmCollectives: all_reduce, reduce_scatter and all_gather among the ranks of one host through one
// POSIX shared-memory segment (docs/design/0020). Each rank copies its pieces into its own slot,
// meets its peers at a futex barrier, and reads theirs: the bytes of a ring, moved by memcpy instead
// of the kernel's socket path, with no wake-ups of communication threads.
// Invariants: every rank calls the same collectives with the same counts in the same order, from one
// thread at a time (a rank that arrives in another op or size fails the collective at once, naming
// both); buffers are raw, contiguous and of one element size; each element of a reduction
// is reduced once, by the rank that owns it, so all ranks end with the same bits; every wait on a
// peer is bounded by the timeout and names the ranks that did not arrive; after a failure (a
// timeout, or a peer's mark_failed) every later call throws at once, quoting the first failure.
// No torch here: callers pass pointers and element counts (Gloo's communicator wires it in).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

namespace accel::comm {

// attach() of a segment whose name does not exist on this host: rank 0 runs on another one.
class ShmNotHere : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class ShmCollectives {
 public:
  // out[i] = op(a[i], b[i]), with out allowed to alias a or b (reduce_kernels.hpp's ReduceFn).
  using Reduce = void (*)(void* out, const void* a, const void* b, size_t n);

  // Bytes of one rank's slot: two halves, one collective piece each.
  static constexpr size_t kSlotBytes = size_t{4} << 20;

  // Rank 0: creates a segment for `world` ranks under a fresh random name (O_CREAT | O_EXCL |
  // O_NOFOLLOW, mode 0600, /accel-shm-<launcher pid>-<128 random bits>) with its pages reserved and
  // a random 64-bit token in its header.
  // Throws std::runtime_error (with the system's reason) when /dev/shm cannot hold it.
  static std::unique_ptr<ShmCollectives> create(int world, std::chrono::milliseconds timeout);
  // Ranks 1..world-1: opens the segment rank 0 described (never through a link). Throws ShmNotHere
  // when its name does not exist here (another host), std::runtime_error when it is not this
  // user's with mode 0600 (checked with fstat before mapping), or is not the one described
  // (another job's, or a stale one).
  static std::unique_ptr<ShmCollectives> attach(const std::string& descriptor, int rank, int world,
                                                std::chrono::milliseconds timeout);
  ~ShmCollectives();
  ShmCollectives(const ShmCollectives&) = delete;
  ShmCollectives& operator=(const ShmCollectives&) = delete;

  // What attach() needs: the segment's name and its token.
  std::string descriptor() const;
  // Removes the name from /dev/shm (rank 0, once every rank attached or gave up); mappings stay.
  void unlink_name() noexcept;

  // In place: `data` (count elements of elem_size bytes) ends as the reduction over all ranks.
  void all_reduce(void* data, int64_t count, size_t elem_size, Reduce reduce);
  // `input` is the full buffer (count elements); `output` receives this rank's shard of the
  // reduction (shard_range(count, world, rank)). `input` is only read. `output` may be a view of
  // `input` that starts at this rank's shard or at the buffer's start: each piece writes only where
  // the reads of this and earlier pieces have passed.
  void reduce_scatter(const void* input, void* output, int64_t count, size_t elem_size, Reduce reduce);
  // `output` is the full buffer (count elements) with this rank's shard already in place; on return
  // every shard holds its owner's data.
  void all_gather(void* output, int64_t count, size_t elem_size);

  // After a failure on this rank: peers waiting at a barrier throw at once, quoting `reason` (the
  // first failure's, when several ranks fail), instead of waiting out the timeout. Idempotent.
  void mark_failed(const std::string& reason = "") noexcept;

  int rank() const { return rank_; }
  int world() const { return world_; }

 private:
  struct Header;
  ShmCollectives(int rank, int world, std::chrono::milliseconds timeout, std::string name, void* base,
                 size_t bytes);
  std::string failure_reason() const;
  static size_t header_bytes(int world);
  static size_t segment_bytes(int world);
  char* slot(int rank, int half) const;
  // Waits until every rank has arrived as often as this one; throws on timeout, on a peer's failure,
  // or when a peer arrived in an op of another `signature` (kind, count, element size).
  void barrier(uint64_t signature);
  // The half the next piece uses (alternates, identically on every rank).
  int next_half() { return static_cast<int>(pieces_++ & 1); }

  const int rank_;
  const int world_;
  const std::chrono::milliseconds timeout_;
  const std::string name_;
  void* const base_;
  const size_t bytes_;
  Header* const header_;
  bool unlinked_ = false;
  uint64_t arrivals_ = 0;  // barriers this rank has reached
  uint64_t pieces_ = 0;
};

}  // namespace accel::comm
