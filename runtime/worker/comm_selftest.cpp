#include "runtime/worker/comm_selftest.hpp"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <functional>
#include <iostream>

#include "runtime/comm/shard_layout.hpp"
#include "runtime/common/sealed_value.hpp"

namespace accel::worker {
namespace {

using comm::ReduceOp;

// Values small enough to be exact in bfloat16 after summing over a few ranks (k % 16 times at
// most 10), so every comparison below is exact, whatever the dtype.
at::Tensor pattern(int64_t n, at::ScalarType dtype) {
  return at::remainder(at::arange(n, at::kLong), 16).to(dtype);
}

// Position-and-owner values for gathers: a shard landing in the wrong place changes the result.
at::Tensor owner_pattern(int64_t n, int world, at::ScalarType dtype) {
  auto k = at::arange(n, at::kLong);
  int64_t chunk = std::max<int64_t>(1, comm::shard_chunk(n, world));
  return (at::remainder(k, 16) + 16 * at::floor_divide(k, chunk)).to(dtype);
}

// A copy of `t` on the communicator's device (the GPU for NCCL). Results are read back with .cpu(),
// which follows the op on the current stream (Work::wait ordered it there).
at::Tensor on(const comm::Communicator& c, const at::Tensor& t) { return t.to(c.device()); }

struct Check {
  std::string name;
  at::ScalarType dtype;
  std::function<bool(comm::Communicator&, int64_t n)> run;  // true when this rank's result is right
};

std::vector<Check> checks(int world, int rank) {
  double tri = world * (world + 1) / 2.0;  // sum over ranks of (rank + 1)
  std::vector<Check> list;
  for (auto dtype : {at::kFloat, at::kBFloat16, at::kLong}) {
    list.push_back({"all_reduce sum", dtype, [=](comm::Communicator& c, int64_t n) {
                      auto t = on(c, pattern(n, dtype) * (rank + 1));
                      c.all_reduce(t, ReduceOp::Sum)->wait();
                      return at::equal(t.cpu(), (pattern(n, at::kDouble) * tri).to(dtype));
                    }});
    list.push_back({"all_reduce max", dtype, [=](comm::Communicator& c, int64_t n) {
                      auto t = on(c, pattern(n, dtype) * (rank + 1));
                      c.all_reduce(t, ReduceOp::Max)->wait();
                      return at::equal(t.cpu(), pattern(n, dtype) * world);
                    }});
    if (dtype != at::kLong)  // an average of integers is not an integer
      list.push_back({"all_reduce avg", dtype, [=](comm::Communicator& c, int64_t n) {
                        auto t = on(c, pattern(n, dtype) * (rank + 1));
                        c.all_reduce(t, ReduceOp::Avg)->wait();
                        return at::equal(t.cpu(), (pattern(n, at::kDouble) * (tri / world)).to(dtype));
                      }});
    list.push_back({"reduce_scatter sum", dtype, [=](comm::Communicator& c, int64_t n) {
                      auto range = comm::shard_range(n, world, rank);
                      auto out = on(c, at::zeros({range.size()}, at::TensorOptions().dtype(dtype)));
                      c.reduce_scatter(on(c, pattern(n, dtype) * (rank + 1)), out, ReduceOp::Sum)->wait();
                      auto expected = (pattern(n, at::kDouble) * tri).to(dtype).slice(0, range.begin, range.end);
                      return at::equal(out.cpu(), expected);
                    }});
    list.push_back({"all_gather", dtype, [=](comm::Communicator& c, int64_t n) {
                      auto range = comm::shard_range(n, world, rank);
                      auto full = owner_pattern(n, world, dtype);
                      auto out = on(c, at::zeros({n}, at::TensorOptions().dtype(dtype)));
                      c.all_gather(on(c, full.slice(0, range.begin, range.end).clone()), out)->wait();
                      return at::equal(out.cpu(), full);
                    }});
    list.push_back({"broadcast", dtype, [=](comm::Communicator& c, int64_t n) {
                      int root = world - 1;
                      auto t = on(c, rank == root ? owner_pattern(n, world, dtype) : at::zeros({n}, at::TensorOptions().dtype(dtype)));
                      c.broadcast(t, root)->wait();
                      return at::equal(t.cpu(), owner_pattern(n, world, dtype));
                    }});
  }
  list.push_back({"barrier", at::kFloat, [](comm::Communicator& c, int64_t) {
                    c.barrier()->wait();
                    return true;
                  }});
  return list;
}

std::string dtype_name(at::ScalarType t) {
  return t == at::kFloat ? "float32" : t == at::kBFloat16 ? "bfloat16" : t == at::kLong ? "int64" : "?";
}

}  // namespace

bool run_comm_selftest(WorkerContext& ctx) {
  auto& c = *ctx.communicator;
  int world = c.size(), rank = c.rank();
  // Divisible and not divisible by the world size, smaller than the world, and a larger buffer.
  std::vector<int64_t> sizes = {1, 5, int64_t(world) * 3 + 1, int64_t(world) * 256, 4099};

  nlohmann::json mine = nlohmann::json::array();
  for (const auto& check : checks(world, rank)) {
    auto start = std::chrono::steady_clock::now();
    std::string failure;
    bool broken = false;  // the communicator threw: the op sequence can no longer be trusted
    for (int64_t n : sizes) {
      try {
        if (!check.run(c, n)) failure += (failure.empty() ? "wrong values at " : ", ") + std::to_string(n) + " elements";
      } catch (const std::exception& e) {
        failure = e.what();
        broken = true;
        break;
      }
    }
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    mine.push_back({{"name", check.name}, {"dtype", dtype_name(check.dtype)}, {"ok", failure.empty()},
                    {"detail", failure}, {"ms", ms}});
    // Wrong values keep every rank on the same op sequence; a thrown error may not, so stop there.
    if (broken) break;
  }

  int local_passed = 0;
  for (const auto& result : mine) local_passed += result["ok"].get<bool>() ? 1 : 0;
  std::cout << "rank " << rank << " of " << world << ": " << local_passed << " of " << mine.size()
            << " checks passed here" << std::endl;

  auto& store = *ctx.rendezvous->store();
  std::string key = ctx.rendezvous->prefix() + "selftest/" + std::to_string(rank);
  std::string text = secret::seal(key, mine.dump());  // the store takes writes from anyone (SECURITY.md)
  store.set(key, std::vector<uint8_t>(text.begin(), text.end()));
  if (rank != 0) return true;  // rank 0 reports for everyone

  std::vector<nlohmann::json> all;
  for (int r = 0; r < world; ++r) {
    const std::string their_key = ctx.rendezvous->prefix() + "selftest/" + std::to_string(r);
    auto bytes = store.get(their_key);
    all.push_back(nlohmann::json::parse(secret::unseal(their_key, std::string(bytes.begin(), bytes.end()))));
  }
  std::cout << "accel test: " << world << " rank" << (world > 1 ? "s" : "") << " over " << ctx.job.job.num_machines
            << " machine(s), communicator " << c.backend_name() << ", sizes";
  for (auto n : sizes) std::cout << " " << n;
  std::cout << " elements\n\n";
  std::printf("%-20s %-9s %-6s %10s  %s\n", "collective", "dtype", "result", "time (ms)", "failing ranks");
  int failed = 0, total = 0;
  for (size_t i = 0; i < all[0].size(); ++i) {
    std::string failing;
    for (int r = 0; r < world; ++r)
      if (i >= all[r].size() || !all[r][i]["ok"].get<bool>())
        failing += (failing.empty() ? "" : "; ") + std::string("rank ") + std::to_string(r) +
                   (i < all[r].size() ? ": " + all[r][i]["detail"].get<std::string>() : ": not run");
    ++total;
    if (!failing.empty()) ++failed;
    std::printf("%-20s %-9s %-6s %10.2f  %s\n", all[0][i]["name"].get<std::string>().c_str(),
                all[0][i]["dtype"].get<std::string>().c_str(), failing.empty() ? "PASS" : "FAIL",
                all[0][i]["ms"].get<double>(), failing.c_str());
  }
  std::cout << "\n" << (total - failed) << " passed, " << failed << " failed\n";
  return failed == 0;
}

}  // namespace accel::worker
