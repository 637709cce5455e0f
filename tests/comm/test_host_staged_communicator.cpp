// The host-staged communicator on a CPU-only machine: Gloo worlds of 1, 2 and 4 ranks (threads) with
// every op staged through private host copies, as it stages CUDA tensors on a GPU machine. The same
// closed-form checks as Gloo's, split groups, stats counted once, and device mismatches refused.
// What this cannot show without a GPU: the device<->host copies and stream order themselves
// (tests/gpu/test_cuda_communicators.cpp covers them where a GPU is lent).
#include "tests/support/catch_with_torch.hpp"

#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <atomic>

#include "runtime/comm/gloo_communicator.hpp"
#include "runtime/comm/host_staged_communicator.hpp"
#include "tests/comm/collective_checks.hpp"
#include "tests/comm/split_checks.hpp"

using namespace accel::comm;
using namespace accel::test;
using namespace std::chrono_literals;
using Catch::Matchers::Contains;

namespace {

std::vector<std::string> run_staged(int world, const RankBody& body) {
  static std::atomic<int> counter{0};
  auto store = c10::make_intrusive<c10d::HashStore>();
  const std::string prefix = "test-staged-" + std::to_string(counter++);
  return run_ranks(
      world,
      [store, world, prefix](int r) {
        return make_host_staged_communicator(make_gloo_communicator(store, r, world, 30s, "127.0.0.1", prefix),
                                             at::kCPU);
      },
      body);
}

}  // namespace

TEST_CASE("staged: identity names the host communicator", "[staged]") {
  auto c = make_host_staged_communicator(
      make_gloo_communicator(c10::make_intrusive<c10d::HashStore>(), 0, 1, 1500ms, "127.0.0.1"), at::kCPU);
  CHECK(c->backend_name() == "gloo-staged");
  CHECK(c->device() == at::Device(at::kCPU));
  CHECK(c->timeout() == 1500ms);
}

TEST_CASE("staged: every collective, even and uneven sizes", "[staged]") {
  const int world = GENERATE(1, 2, 4);
  CAPTURE(world);
  CHECK(run_staged(world, [](Communicator& c) {
          check_all_reduce_cases(c, kAllTypes);
          check_reduce_scatter_cases(c, kMainTypes);
          check_all_gather_cases(c, kMainTypes);
          check_broadcast_cases(c, kMainTypes);
          c.barrier()->wait();
        }) == no_errors(world));
}

TEST_CASE("staged: split forms staged groups (HYBRID_SHARD's machine and replica groups)", "[staged]") {
  CHECK(run_staged(4, [](Communicator& c) {
          auto group = c.split(c.rank() / 2);
          if (group->backend_name() != "gloo-staged") fail("a group of a staged communicator must stage too");
          check_split_machine_and_replica_groups(c);
        }) == no_errors(4));
}

TEST_CASE("staged: results reach the caller's tensors only through wait()", "[staged]") {
  CHECK(run_staged(2, [](Communicator& c) {
          at::Tensor t = at::full({8}, double(c.rank() + 1), at::kDouble);
          auto work = c.all_reduce(t, ReduceOp::Sum);
          work->wait();
          work->wait();  // a second wait is harmless
          expect_values(t, std::vector<double>(8, 3.0), 0.0, "all_reduce after wait");
          if (!work->is_completed()) fail("a waited op is completed");
        }) == no_errors(2));
}

TEST_CASE("staged: stats count each op once, at the staged communicator", "[staged]") {
  CHECK(run_staged(2, [](Communicator& c) {
          at::Tensor full = at::ones({10}, at::kFloat), shard = at::empty({5}, at::kFloat);
          c.all_reduce(full, ReduceOp::Sum)->wait();
          c.reduce_scatter(full, shard, ReduceOp::Sum)->wait();
          c.all_gather(shard, full)->wait();
          const auto& s = c.stats();
          if (s.of(CollectiveKind::AllReduce).calls != 1 || s.of(CollectiveKind::ReduceScatter).calls != 1 ||
              s.of(CollectiveKind::AllGather).calls != 1 || s.of(CollectiveKind::AllReduce).payload_bytes != 40)
            fail("stats: one call per op, payload bytes of the op");
        }) == no_errors(2));
}

TEST_CASE("staged: tensors on another device are refused before anything is sent", "[staged]") {
  auto c = make_host_staged_communicator(
      make_gloo_communicator(c10::make_intrusive<c10d::HashStore>(), 0, 1, 1500ms, "127.0.0.1"), at::kCPU);
  // The meta device stands in for "not the communicator's device" on a machine without a GPU.
  REQUIRE_THROWS_WITH(c->all_reduce(at::empty({4}, at::TensorOptions().device(at::kMeta)), ReduceOp::Sum),
                      Contains("all_reduce on rank 0 of 1") && Contains("is on meta") && Contains("tensors on cpu"));
  CHECK(c->stats().of(CollectiveKind::AllReduce).calls == 0);
}

TEST_CASE("staged: the host communicator must be a CPU one", "[staged]") {
  REQUIRE_THROWS_WITH(make_host_staged_communicator(nullptr, at::kCPU), Contains("host communicator is null"));
}

ACCEL_ASSERT_CHECK_IS_CATCH();
