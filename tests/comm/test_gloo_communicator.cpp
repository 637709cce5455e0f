// The Gloo communicator on 127.0.0.1: N ranks as threads of one process, each with its own
// communicator, rendezvousing through a shared c10d::HashStore (or a TCPStore on port 0). The same
// closed-form checks as the fake, plus timeouts, rendezvous failures and bad arguments. The
// collectives run over both transports: the shared-memory segment the ranks of one host use by
// default (docs/design/0020), and TCP (ACCEL_SHM_DISABLE=1).
#include "tests/support/catch_with_torch.hpp"

#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <atomic>
#include <cstdlib>
#include <optional>

#include "runtime/comm/gloo_communicator.hpp"
#include "tests/comm/collective_checks.hpp"
#include "tests/comm/failure_checks.hpp"
#include "tests/comm/split_checks.hpp"

using namespace accel::comm;
using namespace accel::test;
using namespace std::chrono_literals;

namespace {


// A fresh store prefix per world, so worlds created one after another never read stale addresses.
std::string unique_prefix() {
  static std::atomic<int> counter{0};
  return "test-gloo-" + std::to_string(counter++);
}

MakeCommunicator gloo_maker(c10::intrusive_ptr<c10d::Store> store, int world, std::chrono::milliseconds timeout) {
  const std::string prefix = unique_prefix();
  return [store, world, timeout, prefix](int r) {
    return make_gloo_communicator(store, r, world, timeout, "127.0.0.1", prefix);
  };
}

// Which transport the communicators built in its scope take: ACCEL_SHM_DISABLE is read when a
// communicator is built. Restores the variable as it found it.
class ScopedTransport {
 public:
  explicit ScopedTransport(bool shared_memory) {
    if (const char* v = std::getenv("ACCEL_SHM_DISABLE")) saved_ = v;
    if (shared_memory) {
      unsetenv("ACCEL_SHM_DISABLE");
    } else {
      setenv("ACCEL_SHM_DISABLE", "1", 1);
    }
  }
  ~ScopedTransport() {
    if (saved_) {
      setenv("ACCEL_SHM_DISABLE", saved_->c_str(), 1);
    } else {
      unsetenv("ACCEL_SHM_DISABLE");
    }
  }
  ScopedTransport(const ScopedTransport&) = delete;
  ScopedTransport& operator=(const ScopedTransport&) = delete;

 private:
  std::optional<std::string> saved_;
};

std::vector<std::string> run_gloo(int world, const RankBody& body) {
  return run_ranks(world, gloo_maker(c10::make_intrusive<c10d::HashStore>(), world, 30s), body);
}

}  // namespace

TEST_CASE("gloo: identity", "[gloo]") {
  auto c = make_gloo_communicator(c10::make_intrusive<c10d::HashStore>(), 0, 1, 1500ms, "127.0.0.1");
  CHECK(c->rank() == 0);
  CHECK(c->size() == 1);
  CHECK(c->backend_name() == "gloo");
  CHECK(c->timeout() == 1500ms);
}

TEST_CASE("gloo: all_reduce sum/avg/max over every dtype", "[gloo]") {
  const int world = GENERATE(1, 2, 4);
  const bool shm = GENERATE(true, false);
  ScopedTransport transport(shm);
  CAPTURE(world, shm);
  CHECK(run_gloo(world, [](Communicator& c) { check_all_reduce_cases(c, kAllTypes); }) == no_errors(world));
}

TEST_CASE("gloo: reduce_scatter, even and uneven sizes", "[gloo]") {
  const int world = GENERATE(1, 2, 4);
  const bool shm = GENERATE(true, false);
  ScopedTransport transport(shm);
  CAPTURE(world, shm);
  CHECK(run_gloo(world, [](Communicator& c) { check_reduce_scatter_cases(c, kMainTypes); }) == no_errors(world));
}

TEST_CASE("gloo: reduce_scatter on a world of 3 (not a power of two)", "[gloo]") {
  const bool shm = GENERATE(true, false);
  ScopedTransport transport(shm);
  CAPTURE(shm);
  CHECK(run_gloo(3, [](Communicator& c) { check_reduce_scatter_cases(c, {at::kFloat, at::kInt}); }) == no_errors(3));
}

TEST_CASE("gloo: large uneven buffers (multi-segment transfers)", "[gloo]") {
  const bool shm = GENERATE(true, false);
  ScopedTransport transport(shm);
  CAPTURE(shm);
  // 2^20 + 3 float32 elements: Gloo splits the all_reduce into many segments and each ring step
  // of reduce_scatter moves a ~1 MiB chunk. Values stay below 2^24, so comparisons are exact.
  CHECK(run_gloo(4, [](Communicator& c) {
          const int w = c.size(), r = c.rank();
          const int64_t n = (int64_t{1} << 20) + 3;
          const ShardRange shard = shard_range(n, w, r);
          at::Tensor full = contribution(r, n, at::kFloat);
          at::Tensor out = at::empty({shard.size()}, at::kFloat);
          c.reduce_scatter(full, out, ReduceOp::Sum)->wait();
          expect_values(out, reduced(ReduceOp::Sum, w, shard.begin, shard.end, at::kFloat), 0.0, "large reduce_scatter");
          at::Tensor gathered = at::empty({n}, at::kFloat);
          c.all_gather(out, gathered)->wait();
          expect_values(gathered, reduced(ReduceOp::Sum, w, 0, n, at::kFloat), 0.0, "large all_gather");
          c.all_reduce(full, ReduceOp::Max)->wait();
          expect_values(full, reduced(ReduceOp::Max, w, 0, n, at::kFloat), 0.0, "large all_reduce(max)");
        }) == no_errors(4));
}

TEST_CASE("gloo: reduce_scatter_consuming reduces in the given-up input, with the same result", "[gloo]") {
  const int world = GENERATE(2, 3);
  const bool shm = GENERATE(true, false);
  ScopedTransport transport(shm);
  CAPTURE(world, shm);
  CHECK(run_gloo(world, [](Communicator& c) {
          const int w = c.size(), r = c.rank();
          for (int64_t n : {int64_t(1000), int64_t(7)}) {  // even and uneven (padded) shards
            const ShardRange shard = shard_range(n, w, r);
            at::Tensor full = contribution(r, n, at::kFloat);
            at::Tensor copied = at::empty({shard.size()}, at::kFloat), consumed = at::empty({shard.size()}, at::kFloat);
            c.reduce_scatter(full, copied, ReduceOp::Avg)->wait();
            c.reduce_scatter_consuming(full, consumed, ReduceOp::Avg)->wait();
            const auto want = reduced(ReduceOp::Avg, w, shard.begin, shard.end, at::kFloat);
            expect_values(consumed, want, tolerance(ReduceOp::Avg, at::kFloat), "reduce_scatter_consuming");
            if (!at::equal(consumed, copied)) fail("reduce_scatter_consuming differs from reduce_scatter");
            // A view of the input as the output still works (the ring then reduces in a copy).
            at::Tensor again = contribution(r, n, at::kFloat);
            c.reduce_scatter_consuming(again, again.narrow(0, 0, shard.size()), ReduceOp::Avg)->wait();
            if (!at::equal(again.narrow(0, 0, shard.size()), copied)) fail("consuming into a view of the input");
          }
        }) == no_errors(world));
}

TEST_CASE("gloo: all_gather, even and uneven sizes", "[gloo]") {
  const int world = GENERATE(1, 2, 4);
  const bool shm = GENERATE(true, false);
  ScopedTransport transport(shm);
  CAPTURE(world, shm);
  CHECK(run_gloo(world, [](Communicator& c) { check_all_gather_cases(c, kMainTypes); }) == no_errors(world));
}

TEST_CASE("gloo: broadcast from every root", "[gloo]") {
  const int world = GENERATE(1, 2, 4);
  CAPTURE(world);
  CHECK(run_gloo(world, [](Communicator& c) { check_broadcast_cases(c, kMainTypes); }) == no_errors(world));
}

TEST_CASE("gloo: async ops complete in issue order", "[gloo]") {
  const int world = GENERATE(1, 2, 4);
  CAPTURE(world);
  CHECK(run_gloo(world, check_async_in_order) == no_errors(world));
}

TEST_CASE("gloo: tensors that require grad are written without autograd", "[gloo]") {
  const int world = GENERATE(1, 2);
  CAPTURE(world);
  CHECK(run_gloo(world, check_requires_grad_tensors) == no_errors(world));
}

TEST_CASE("gloo: the ranks of one host take shared memory unless ACCEL_SHM_DISABLE is set", "[gloo]") {
  for (const bool shm : {true, false}) {
    ScopedTransport transport(shm);
    CAPTURE(shm);
    CHECK(run_gloo(2, [shm](Communicator& c) {
            const std::string want = shm ? "gloo (shared memory)" : "gloo (tcp)";
            if (transport_of(c) != want) fail("transport is '" + transport_of(c) + "', expected '" + want + "'");
            if (c.backend_name() != "gloo") fail("backend_name changed with the transport");
          }) == no_errors(2));
  }
  // World 1 has no peers to share memory with.
  auto solo = make_gloo_communicator(c10::make_intrusive<c10d::HashStore>(), 0, 1, 1500ms, "127.0.0.1");
  CHECK(transport_of(*solo) == "gloo (tcp)");
}

TEST_CASE("gloo: stats count calls and payload bytes", "[gloo]") {
  const int world = GENERATE(1, 2, 4);
  CAPTURE(world);
  CHECK(run_gloo(world, check_stats) == no_errors(world));
}

TEST_CASE("gloo: rendezvous through a TCPStore on port 0", "[gloo]") {
  c10d::TCPStoreOptions server_opts;
  server_opts.port = 0;
  server_opts.isServer = true;
  server_opts.waitWorkers = false;
  server_opts.timeout = 30s;
  auto server = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", server_opts);
  REQUIRE(server->getPort() != 0);
  const auto port = server->getPort();
  const std::string prefix = unique_prefix();
  auto errors = run_ranks(
      2,
      [&](int r) {
        c10::intrusive_ptr<c10d::Store> store = server;
        if (r != 0) {
          c10d::TCPStoreOptions client_opts;
          client_opts.port = port;
          client_opts.timeout = 30s;
          store = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", client_opts);
        }
        return make_gloo_communicator(store, r, 2, 30s, "127.0.0.1", prefix);
      },
      [](Communicator& c) { check_all_reduce_cases(c, {at::kFloat}); });
  CHECK(errors == no_errors(2));
}

TEST_CASE("gloo: several worlds share one store under distinct prefixes", "[gloo]") {
  auto store = c10::make_intrusive<c10d::HashStore>();
  for (int round = 0; round < 2; ++round) {
    auto errors = run_ranks(2, gloo_maker(store, 2, 30s), [](Communicator& c) {
      at::Tensor t = at::full({3}, static_cast<double>(c.rank() + 1), at::kDouble);
      c.all_reduce(t, ReduceOp::Sum)->wait();
      expect_values(t, {3.0, 3.0, 3.0}, 0.0, "all_reduce over a reused store");
    });
    CHECK(errors == no_errors(2));
  }
}

TEST_CASE("gloo: invalid arguments are rejected with the op and expected size", "[gloo]") {
  auto comms = make_all(2, gloo_maker(c10::make_intrusive<c10d::HashStore>(), 2, 30s));
  check_invalid_inputs(comms);
}

TEST_CASE("gloo: a rank that never calls all_reduce makes the other time out", "[gloo][timeout]") {
  const bool shm = GENERATE(true, false);
  ScopedTransport transport(shm);
  CAPTURE(shm);
  auto outcome = run_missing_peer(gloo_maker(c10::make_intrusive<c10d::HashStore>(), 2, 2000ms));
  check_missing_peer(outcome);
}

TEST_CASE("gloo: a rank that never joins fails the rendezvous with CommError", "[gloo][timeout]") {
  auto store = c10::make_intrusive<c10d::HashStore>();
  REQUIRE_THROWS_AS(make_gloo_communicator(store, 0, 2, 1000ms, "127.0.0.1", "lonely"), CommError);
  REQUIRE_THROWS_WITH(make_gloo_communicator(store, 0, 2, 1000ms, "127.0.0.1", "lonely2"),
                      Contains("rank 0 of 2") && Contains("1000 ms") && Contains("lonely2"));
}

TEST_CASE("gloo: factory arguments are validated", "[gloo]") {
  auto store = c10::make_intrusive<c10d::HashStore>();
  REQUIRE_THROWS_WITH(make_gloo_communicator(store, 2, 2, 1000ms, "127.0.0.1"), Contains("out of range"));
  REQUIRE_THROWS_WITH(make_gloo_communicator(nullptr, 0, 1, 1000ms, "127.0.0.1"), Contains("store is null"));
  REQUIRE_THROWS_WITH(make_gloo_communicator(store, 0, 1, 0ms, "127.0.0.1"), Contains("timeout must be positive"));
}

TEST_CASE("gloo: every waiting rank fails when one rank skips reduce_scatter", "[gloo][timeout]") {
  const bool shm = GENERATE(true, false);
  ScopedTransport transport(shm);
  CAPTURE(shm);
  for (const auto& m : run_reduce_scatter_without_last_rank(gloo_maker(c10::make_intrusive<c10d::HashStore>(), 3, 1000ms), 3)) {
    CHECK_THAT(m, Contains("reduce_scatter") && Contains("of 3"));
  }
}

ACCEL_ASSERT_CHECK_IS_CATCH();

TEST_CASE("gloo: split forms machine and replica groups (HYBRID_SHARD's layout)", "[gloo][split]") {
  CHECK(run_gloo(4, check_split_machine_and_replica_groups) == no_errors(4));
}
