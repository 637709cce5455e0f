// Backend-agnostic rank bodies for the collective tests: each runs on one rank's thread, issues
// ops on the communicator's device with closed-form expected results and throws on the first
// wrong element.
// Closed forms: rank r contributes (r + 1) * i at element i, so over W ranks
//   sum = i * W (W + 1) / 2,  avg = sum / W (integer dtypes truncate),  max = W * i.
// Tolerances: float32/float64/int32/int64 compare exactly (every value is an integer or a half
// below 2^24, so no rounding happens); 16-bit floats round each input and each pairwise add
// (bfloat16: relative error <= 2^-8 per rounding; the input, W-1 adds and Avg's division give
// <= (W + 1) * 2^-8 < 2% for W <= 4), so they use rtol 2e-2. Max and copies are exact after
// rounding the expected value through the dtype, because they select or move stored values.
#pragma once

#include <string>
#include <vector>

#include "runtime/comm/communicator.hpp"
#include "runtime/comm/shard_layout.hpp"
#include "tests/comm/comm_test_support.hpp"

namespace accel::test {

// The dtypes every implementation is checked over: the main ones per op, all six for all_reduce.
inline const std::vector<at::ScalarType> kMainTypes{at::kFloat, at::kBFloat16, at::kLong};
inline const std::vector<at::ScalarType> kAllTypes{at::kFloat, at::kDouble, at::kBFloat16, at::kHalf, at::kInt, at::kLong};

inline const std::vector<int64_t>& test_sizes() {
  static const std::vector<int64_t> sizes{0, 1, 7, 1000, 1001};
  return sizes;
}

inline bool is_16bit_float(at::ScalarType t) { return t == at::kBFloat16 || t == at::kHalf; }

// Rank r's contribution to a full buffer of n elements: (r + 1) * i.
inline at::Tensor contribution(int rank, int64_t n, at::ScalarType type) {
  return (at::arange(n, at::kDouble) * static_cast<double>(rank + 1)).to(type);
}

// The closed-form reduction of every rank's contribution over [begin, end).
inline std::vector<double> reduced(comm::ReduceOp op, int world, int64_t begin, int64_t end, at::ScalarType type) {
  std::vector<double> out;
  for (int64_t i = begin; i < end; ++i) {
    const int64_t sum = i * world * (world + 1) / 2;
    switch (op) {
      case comm::ReduceOp::Sum: out.push_back(static_cast<double>(sum)); break;
      case comm::ReduceOp::Avg:
        out.push_back(at::isIntegralType(type, false) ? static_cast<double>(sum / world)
                                                      : static_cast<double>(sum) / world);
        break;
      case comm::ReduceOp::Max: out.push_back(static_cast<double>(world * i)); break;
    }
  }
  return op == comm::ReduceOp::Max ? rounded_to(out, type) : out;
}

inline double tolerance(comm::ReduceOp op, at::ScalarType type) {
  return is_16bit_float(type) && op != comm::ReduceOp::Max ? 2e-2 : 0.0;
}

inline std::string label(const char* what, comm::ReduceOp op, at::ScalarType type, int64_t n, int rank) {
  return std::string(what) + "(" + comm::to_string(op) + ", " + dtype_label(type) + ", n=" + std::to_string(n) +
         ") on rank " + std::to_string(rank);
}

inline const std::vector<comm::ReduceOp>& all_ops() {
  static const std::vector<comm::ReduceOp> ops{comm::ReduceOp::Sum, comm::ReduceOp::Avg, comm::ReduceOp::Max};
  return ops;
}

inline void check_all_reduce_cases(comm::Communicator& c, const std::vector<at::ScalarType>& types) {
  const int w = c.size(), r = c.rank();
  for (auto type : types) {
    for (int64_t n : test_sizes()) {
      for (auto op : all_ops()) {
        at::Tensor t = contribution(r, n, type).to(c.device());
        c.all_reduce(t, op)->wait();
        expect_values(t, reduced(op, w, 0, n, type), tolerance(op, type), label("all_reduce", op, type, n, r));
      }
    }
  }
}

inline void check_reduce_scatter_cases(comm::Communicator& c, const std::vector<at::ScalarType>& types) {
  const int w = c.size(), r = c.rank();
  for (auto type : types) {
    for (int64_t n : test_sizes()) {
      const comm::ShardRange shard = comm::shard_range(n, w, r);
      for (auto op : all_ops()) {
        at::Tensor input = contribution(r, n, type).to(c.device());
        at::Tensor before = input.clone();
        at::Tensor output = at::full({shard.size()}, -1.0, at::TensorOptions().dtype(type).device(c.device()));
        c.reduce_scatter(input, output, op)->wait();
        const std::string what = label("reduce_scatter", op, type, n, r);
        expect_values(output, reduced(op, w, shard.begin, shard.end, type), tolerance(op, type), what);
        if (!at::equal(input, before)) fail(what + ": the input buffer was modified");
      }
    }
  }
}

// Rank r holds the slice shard_range(n, W, r) of the pattern 3 * i + 1; everyone gathers it all.
inline std::vector<double> gather_pattern(int64_t begin, int64_t end, at::ScalarType type) {
  std::vector<double> v;
  for (int64_t i = begin; i < end; ++i) v.push_back(3.0 * static_cast<double>(i) + 1.0);
  return rounded_to(v, type);
}

inline void check_all_gather_cases(comm::Communicator& c, const std::vector<at::ScalarType>& types) {
  const int w = c.size(), r = c.rank();
  for (auto type : types) {
    for (int64_t n : test_sizes()) {
      const comm::ShardRange shard = comm::shard_range(n, w, r);
      const auto mine = gather_pattern(shard.begin, shard.end, type);
      at::Tensor input = at::tensor(std::vector<double>(mine), at::kDouble).reshape({shard.size()}).to(type).to(c.device());
      at::Tensor output = at::full({n}, -1.0, at::TensorOptions().dtype(type).device(c.device()));
      c.all_gather(input, output)->wait();
      expect_values(output, gather_pattern(0, n, type), 0.0,
                    "all_gather(" + dtype_label(type) + ", n=" + std::to_string(n) + ") on rank " + std::to_string(r));
    }
  }
}

inline void check_broadcast_cases(comm::Communicator& c, const std::vector<at::ScalarType>& types) {
  const int w = c.size(), r = c.rank();
  for (auto type : types) {
    for (int64_t n : test_sizes()) {
      for (int root = 0; root < w; ++root) {
        // Every rank starts with its own values (r + 1) * i + r; root's must win everywhere.
        at::Tensor t = (at::arange(n, at::kDouble) * (r + 1) + r).to(type).to(c.device());
        c.broadcast(t, root)->wait();
        std::vector<double> want;
        for (int64_t i = 0; i < n; ++i) want.push_back(static_cast<double>((root + 1) * i + root));
        expect_values(t, rounded_to(want, type), 0.0,
                      "broadcast(root " + std::to_string(root) + ", " + dtype_label(type) + ", n=" + std::to_string(n) +
                          ") on rank " + std::to_string(r));
      }
    }
  }
}

inline std::vector<double> gather_ramp(int64_t n) {
  std::vector<double> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(static_cast<double>(i));
  return v;
}

// Issues several ops without waiting, then waits in issue order. The two all_reduces on the same
// tensor only give W * sum if the ops ran in issue order.
inline void check_async_in_order(comm::Communicator& c) {
  const int w = c.size(), r = c.rank();
  const int64_t n = 1001;
  const comm::ShardRange shard = comm::shard_range(n, w, r);
  at::Tensor twice = contribution(r, n, at::kLong);
  at::Tensor rs_in = contribution(r, n, at::kFloat);
  at::Tensor rs_out = at::zeros({shard.size()}, at::kFloat);
  at::Tensor ag_in = at::arange(shard.begin, shard.end, at::kLong);
  at::Tensor ag_out = at::full({n}, -1, at::kLong);
  at::Tensor bc = at::full({5}, static_cast<double>(r), at::kDouble);
  at::Tensor avg = contribution(r, 7, at::kBFloat16);

  std::vector<comm::WorkPtr> works;
  works.push_back(c.all_reduce(twice, comm::ReduceOp::Sum));
  works.push_back(c.reduce_scatter(rs_in, rs_out, comm::ReduceOp::Max));
  works.push_back(c.all_reduce(twice, comm::ReduceOp::Sum));
  works.push_back(c.all_gather(ag_in, ag_out));
  works.push_back(c.broadcast(bc, w - 1));
  works.push_back(c.barrier());
  works.push_back(c.all_reduce(avg, comm::ReduceOp::Avg));
  for (auto& work : works) work->wait();
  for (auto& work : works) {
    if (!work->is_completed()) fail("a waited Work reports is_completed() == false");
  }

  std::vector<double> want_twice;
  for (double v : reduced(comm::ReduceOp::Sum, w, 0, n, at::kLong)) want_twice.push_back(v * w);
  expect_values(twice, want_twice, 0.0, "async: all_reduce(sum) twice in a row");
  expect_values(rs_out, reduced(comm::ReduceOp::Max, w, shard.begin, shard.end, at::kFloat), 0.0,
                "async: reduce_scatter(max)");
  expect_values(ag_out, gather_ramp(n), 0.0, "async: all_gather");
  expect_values(bc, std::vector<double>(5, static_cast<double>(w - 1)), 0.0, "async: broadcast from the last rank");
  expect_values(avg, reduced(comm::ReduceOp::Avg, w, 0, 7, at::kBFloat16), 2e-2, "async: all_reduce(avg, bf16)");
}

// Parameters and flat buffers often require grad; collectives write them without autograd
// (in-place writes to such leaves would otherwise throw).
inline void check_requires_grad_tensors(comm::Communicator& c) {
  const int w = c.size(), r = c.rank();
  const int64_t n = 7;
  at::Tensor t = contribution(r, n, at::kFloat).set_requires_grad(true);
  c.all_reduce(t, comm::ReduceOp::Avg)->wait();
  expect_values(t.detach(), reduced(comm::ReduceOp::Avg, w, 0, n, at::kFloat), 0.0, "all_reduce(avg) on a leaf");
  const comm::ShardRange shard = comm::shard_range(n, w, r);
  at::Tensor flat = at::zeros({n}).set_requires_grad(true);
  at::Tensor mine = at::arange(shard.begin, shard.end, at::kFloat);
  c.all_gather(mine, flat)->wait();
  expect_values(flat.detach(), gather_ramp(n), 0.0, "all_gather into a leaf");
  at::Tensor out = at::zeros({shard.size()}).set_requires_grad(true);
  c.reduce_scatter(contribution(r, n, at::kFloat), out, comm::ReduceOp::Avg)->wait();
  expect_values(out.detach(), reduced(comm::ReduceOp::Avg, w, shard.begin, shard.end, at::kFloat), 0.0,
                "reduce_scatter(avg) into a leaf");
  if (t.grad_fn() || flat.grad_fn() || out.grad_fn()) fail("a collective recorded autograd history");
}

// A fixed op sequence whose stats are known in closed form; throws on the first wrong counter.
inline void check_stats(comm::Communicator& c) {
  using comm::CollectiveKind;
  const int w = c.size(), r = c.rank();
  c.reset_stats();
  at::Tensor a = at::ones({1001}, at::kFloat);
  auto first = c.all_reduce(a, comm::ReduceOp::Sum);
  // Counted on issue, before the op completes.
  if (c.stats().of(CollectiveKind::AllReduce).calls != 1) fail("stats: all_reduce not counted on issue");
  first->wait();
  c.all_reduce(a, comm::ReduceOp::Max)->wait();
  const int64_t n = 1001;
  at::Tensor rs_out = at::empty({comm::shard_range(n, w, r).size()}, at::kBFloat16);
  c.reduce_scatter(at::ones({n}, at::kBFloat16), rs_out, comm::ReduceOp::Sum)->wait();
  at::Tensor ag_out = at::empty({7}, at::kLong);
  c.all_gather(at::ones({comm::shard_range(7, w, r).size()}, at::kLong), ag_out)->wait();
  c.broadcast(at::ones({10}, at::kDouble), 0)->wait();
  c.barrier()->wait();

  struct Want {
    CollectiveKind kind;
    int64_t calls;
    int64_t bytes;
  };
  const std::vector<Want> wants{{CollectiveKind::AllReduce, 2, 2 * 1001 * 4},
                                {CollectiveKind::ReduceScatter, 1, 1001 * 2},
                                {CollectiveKind::AllGather, 1, 7 * 8},
                                {CollectiveKind::Broadcast, 1, 10 * 8},
                                {CollectiveKind::Barrier, 1, 0}};
  double total = 0.0;
  for (const auto& want : wants) {
    const auto& got = c.stats().of(want.kind);
    const std::string name = comm::to_string(want.kind);
    if (got.calls != want.calls || got.payload_bytes != want.bytes) {
      fail("stats: " + name + " has " + std::to_string(got.calls) + " calls / " + std::to_string(got.payload_bytes) +
           " bytes, want " + std::to_string(want.calls) + " / " + std::to_string(want.bytes));
    }
    const double bus = static_cast<double>(want.bytes) * comm::bus_factor(want.kind, w);
    if (c.stats().bus_bytes(want.kind, w) != bus) fail("stats: bus_bytes(" + name + ") is wrong");
    total += bus;
  }
  if (c.stats().total_bus_bytes(w) != total) fail("stats: total_bus_bytes is wrong");
  c.reset_stats();
  if (c.stats().of(CollectiveKind::AllReduce).calls != 0) fail("stats: reset_stats() left counts behind");
}

}  // namespace accel::test
