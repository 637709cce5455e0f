// Ring collectives over c10d point-to-point. At step s (0 <= s < W-1) rank r sends one chunk to
// rank r+1 and receives one from rank r-1:
//  - reduce-scatter: sends its partial sum of chunk (r-s-1) mod W and adds its own contribution to
//    the received chunk (r-s-2) mod W; after W-1 steps chunk r has passed every rank and is complete.
//  - all-gather: sends chunk (r-s) mod W (its own at step 0, then the one just received) and
//    receives chunk (r-s-1) mod W straight into its place in the buffer.
#include "runtime/comm/ring_collectives.hpp"

#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <string>

namespace accel::comm {
namespace {

int wrap(int i, int world) { return ((i % world) + world) % world; }

void check_args(const RingArgs& a, const at::Tensor& buffer, const char* what) {
  const int world = a.backend->getSize();
  if (static_cast<int>(a.counts.size()) != world) {
    throw std::invalid_argument(std::string(what) + ": counts has " + std::to_string(a.counts.size()) +
                                " entries for a world of " + std::to_string(world));
  }
  const int64_t total = std::accumulate(a.counts.begin(), a.counts.end(), int64_t{0});
  if (buffer.dim() != 1 || !buffer.is_contiguous() || buffer.numel() != total) {
    throw std::invalid_argument(std::string(what) + ": the buffer must be 1-D, contiguous and hold the sum of counts");
  }
}

// Waits for a send or receive; a false return (an aborted buffer) is a failure too. A failure names
// the peer, so a timeout says which rank never sent (or received) its chunk.
void wait_for(const c10::intrusive_ptr<c10d::Work>& work, std::chrono::milliseconds timeout, const std::string& what) {
  bool ok = false;
  try {
    ok = work->wait(timeout);
  } catch (const c10::Error& e) {
    throw std::runtime_error(what + ": " + e.what_without_backtrace());
  } catch (const std::exception& e) {
    throw std::runtime_error(what + ": " + e.what());
  }
  if (!ok) throw std::runtime_error(what + " aborted");
}

// One step's exchange: post the receive, send, then wait for both (the receive first, so the
// caller can reduce while the send drains). `after_recv` runs once the chunk has arrived.
template <typename AfterRecv>
void exchange(const RingArgs& a, int step, at::Tensor send_chunk, at::Tensor recv_chunk, AfterRecv after_recv) {
  const int world = a.backend->getSize();
  const int rank = a.backend->getRank();
  const int tag = a.first_tag + step;
  c10::intrusive_ptr<c10d::Work> recv_work;
  c10::intrusive_ptr<c10d::Work> send_work;
  if (recv_chunk.numel() > 0) {
    std::vector<at::Tensor> recv{recv_chunk};
    recv_work = a.backend->recv(recv, wrap(rank - 1, world), tag);
  }
  if (send_chunk.numel() > 0) {
    std::vector<at::Tensor> send{send_chunk};
    send_work = a.backend->send(send, wrap(rank + 1, world), tag);
  }
  if (recv_work) {
    wait_for(recv_work, a.timeout, "ring receive from rank " + std::to_string(wrap(rank - 1, world)));
    after_recv();
  }
  if (send_work) wait_for(send_work, a.timeout, "ring send to rank " + std::to_string(wrap(rank + 1, world)));
}

}  // namespace

int ring_tags(int world) { return std::max(world - 1, 0); }

int64_t chunk_offset(const std::vector<int64_t>& counts, int r) {
  return std::accumulate(counts.begin(), counts.begin() + r, int64_t{0});
}

void ring_reduce_scatter(const RingArgs& a, at::Tensor accumulator, ReduceFn reduce) {
  check_args(a, accumulator, "ring_reduce_scatter");
  const int world = a.backend->getSize();
  const int rank = a.backend->getRank();
  if (world == 1 || accumulator.numel() == 0) return;
  const int64_t max_count = *std::max_element(a.counts.begin(), a.counts.end());
  at::Tensor scratch = at::empty({max_count}, accumulator.options());
  auto chunk = [&](int r) { return accumulator.narrow(0, chunk_offset(a.counts, r), a.counts[r]); };

  for (int step = 0; step < world - 1; ++step) {
    at::Tensor mine = chunk(wrap(rank - step - 2, world));
    at::Tensor incoming = scratch.narrow(0, 0, mine.numel());
    exchange(a, step, chunk(wrap(rank - step - 1, world)), incoming, [&] {
      reduce(mine.data_ptr(), mine.data_ptr(), incoming.data_ptr(), static_cast<size_t>(mine.numel()));
    });
  }
}

void ring_all_gather(const RingArgs& a, at::Tensor buffer) {
  check_args(a, buffer, "ring_all_gather");
  const int world = a.backend->getSize();
  const int rank = a.backend->getRank();
  if (world == 1 || buffer.numel() == 0) return;
  auto chunk = [&](int r) { return buffer.narrow(0, chunk_offset(a.counts, r), a.counts[r]); };
  for (int step = 0; step < world - 1; ++step) {
    exchange(a, step, chunk(wrap(rank - step, world)), chunk(wrap(rank - step - 1, world)), [] {});
  }
}

}  // namespace accel::comm
