// Benchmark (not a test: it asserts nothing): what the collective flight recorder costs per op, in
// one process. (1) A ring's own work per op: issue, start, finish (three clock reads, two seqlocked
// slot writes). (2) An OpQueue round trip (submit a no-op, wait for it) with and without a ring, in
// alternating rounds, so a shift in the machine's load touches both. Prints one JSON object;
// scripts/bench_flight_recorder.py runs it beside `accel bench comm` with and without recording.
//   bench_flight_recorder [ring_ops] [queue_ops] [rounds]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#include "runtime/comm/flight_ring.hpp"
#include "runtime/comm/op_queue.hpp"

using namespace accel::comm;
using Clock = std::chrono::steady_clock;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

FlightGroup group() {
  FlightGroup g;
  g.members = {0, 1};
  return g;
}

double ring_ns_per_op(long ops) {
  FlightRing ring(group());
  const auto start = Clock::now();
  for (long i = 0; i < ops; ++i) {
    FlightOp op;
    op.op = "all_reduce";
    op.dtype = "float32";
    op.count = i;
    op.bytes = 4 * i;
    ring.issue(op);
    ring.start(op);
    ring.finish(op, true);
  }
  return std::chrono::duration<double, std::nano>(Clock::now() - start).count() / static_cast<double>(ops);
}

double queue_us_per_op(long ops, bool recording) {
  OpQueue queue(0, 2, recording ? std::make_shared<FlightRing>(group()) : nullptr);
  FlightOp op;
  op.op = "all_reduce";
  op.dtype = "float32";
  op.count = 2;
  op.bytes = 8;
  const auto start = Clock::now();
  for (long i = 0; i < ops; ++i) queue.submit(op, [] {})->wait();
  return std::chrono::duration<double, std::micro>(Clock::now() - start).count() / static_cast<double>(ops);
}

}  // namespace

int main(int argc, char** argv) {
  const long ring_ops = argc > 1 ? std::atol(argv[1]) : 2'000'000;
  const long queue_ops = argc > 2 ? std::atol(argv[2]) : 20'000;
  const int rounds = argc > 3 ? std::atoi(argv[3]) : 7;
  std::vector<double> ring, on, off;
  for (int r = 0; r < rounds; ++r) {
    ring.push_back(ring_ns_per_op(ring_ops));
    off.push_back(queue_us_per_op(queue_ops, false));
    on.push_back(queue_us_per_op(queue_ops, true));
  }
  std::printf(
      "{\"ring_ops\": %ld, \"queue_ops\": %ld, \"rounds\": %d, \"ring_ns_per_op\": %.1f, "
      "\"queue_round_trip_us_recording_off\": %.3f, \"queue_round_trip_us_recording_on\": %.3f}\n",
      ring_ops, queue_ops, rounds, median(ring), median(off), median(on));
  return 0;
}
