// FlightRing: a seqlock per slot; see flight_ring.hpp.
// Writer (one thread): version odd, release fence, fields (relaxed), version even (release).
// Reader: version (acquire), fields (relaxed), acquire fence, version again; the copy is whole when
// both versions are equal and even (Boehm, "Can seqlocks get along with programming language
// memory models?", 2012).
#include "runtime/comm/flight_ring.hpp"

#include <time.h>

#include <algorithm>

#include "runtime/common/wall_clock.hpp"

namespace accel::comm {
namespace {

constexpr auto kRelaxed = std::memory_order_relaxed;

// Process-wide issue order over every ring (the diagnosis orders a rank's ops across groups).
std::atomic<uint64_t> g_issue_order{0};

// The issue time, to the kernel's tick (a few ms) for a third of the fine clock's cost: it only
// places an op before or after the launcher's detection, seconds apart; starts and ends, which give
// durations, read the fine clock.
int64_t coarse_realtime_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME_COARSE, &ts);
  return int64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// A reader's tries at one slot before it counts the slot as torn: a writer holds a slot for a few
// stores, so a second try nearly always succeeds; more only if the reader is preempted each time.
constexpr int kReadTries = 64;

}  // namespace

struct FlightRing::Slot {
  std::atomic<uint64_t> version{0};
  std::atomic<uint64_t> seq{0};
  std::atomic<uint64_t> order{0};
  std::atomic<const char*> op{""};
  std::atomic<const char*> dtype{""};
  std::atomic<int64_t> count{0};
  std::atomic<int64_t> bytes{0};
  std::atomic<int32_t> root{-1};
  std::atomic<int64_t> issued_ns{0};
  std::atomic<int64_t> started_ns{0};
  std::atomic<int64_t> ended_ns{0};
  std::atomic<uint8_t> state{0};  // flight::OpState

  // Runs `write` between the odd and the even version.
  template <typename Write>
  void update(Write&& write) {
    const uint64_t v = version.load(kRelaxed);
    version.store(v + 1, kRelaxed);
    std::atomic_thread_fence(std::memory_order_release);
    write();
    version.store(v + 2, std::memory_order_release);
  }

  // A whole copy of the record, or false when a write overlapped every try.
  bool read(flight::OpRecord& out) const {
    for (int i = 0; i < kReadTries; ++i) {
      const uint64_t v1 = version.load(std::memory_order_acquire);
      if (v1 & 1) continue;
      out.seq = seq.load(kRelaxed);
      out.order = order.load(kRelaxed);
      out.op = op.load(kRelaxed);
      out.dtype = dtype.load(kRelaxed);
      out.count = count.load(kRelaxed);
      out.bytes = bytes.load(kRelaxed);
      out.root = root.load(kRelaxed);
      out.issued_ns = issued_ns.load(kRelaxed);
      out.started_ns = started_ns.load(kRelaxed);
      out.ended_ns = ended_ns.load(kRelaxed);
      out.state = static_cast<flight::OpState>(state.load(kRelaxed));
      std::atomic_thread_fence(std::memory_order_acquire);
      if (version.load(kRelaxed) == v1) return true;
    }
    return false;
  }
};

FlightRing::FlightRing(FlightGroup group, size_t capacity)
    : group_(std::move(group)), capacity_(capacity > 0 ? capacity : 1), slots_(new Slot[capacity_]) {}

FlightRing::~FlightRing() = default;

FlightRing::Slot& FlightRing::slot_of(uint64_t seq) const { return slots_[(seq - 1) % capacity_]; }

void FlightRing::issue(FlightOp& op) {
  op.seq = issued_.fetch_add(1, kRelaxed) + 1;
  op.order = g_issue_order.fetch_add(1, kRelaxed) + 1;
  op.issued_ns = coarse_realtime_ns();
}

void FlightRing::start(const FlightOp& op) {
  const int64_t now = realtime_ns();
  Slot& s = slot_of(op.seq);
  s.update([&] {
    s.seq.store(op.seq, kRelaxed);
    s.order.store(op.order, kRelaxed);
    s.op.store(op.op, kRelaxed);
    s.dtype.store(op.dtype, kRelaxed);
    s.count.store(op.count, kRelaxed);
    s.bytes.store(op.bytes, kRelaxed);
    s.root.store(op.root, kRelaxed);
    s.issued_ns.store(op.issued_ns, kRelaxed);
    s.started_ns.store(now, kRelaxed);
    s.ended_ns.store(0, kRelaxed);
    s.state.store(static_cast<uint8_t>(flight::OpState::Running), kRelaxed);
  });
  started_.store(op.seq, std::memory_order_release);
}

void FlightRing::finish(const FlightOp& op, bool ok) {
  const int64_t now = realtime_ns();
  Slot& s = slot_of(op.seq);
  s.update([&] {
    s.ended_ns.store(now, kRelaxed);
    s.state.store(static_cast<uint8_t>(ok ? flight::OpState::Completed : flight::OpState::Failed), kRelaxed);
  });
}

flight::GroupRecords FlightRing::snapshot() const {
  flight::GroupRecords g;
  g.name = group_.name;
  g.members = group_.members;
  g.group_rank = group_.group_rank;
  g.timeout_ms = group_.timeout_ms;
  g.closed = closed_.load(kRelaxed);
  const uint64_t newest = started_.load(std::memory_order_acquire);
  g.issued = std::max(issued_.load(kRelaxed), newest);
  const uint64_t oldest = newest > capacity_ ? newest - capacity_ + 1 : 1;
  g.records.reserve(static_cast<size_t>(newest - oldest + 1));
  for (uint64_t seq = oldest; seq <= newest && newest > 0; ++seq) {
    flight::OpRecord r;
    if (!slot_of(seq).read(r)) {
      ++g.torn;
      continue;
    }
    if (r.seq == seq) g.records.push_back(std::move(r));  // else overwritten by a newer op meanwhile
  }
  return g;
}

}  // namespace accel::comm
