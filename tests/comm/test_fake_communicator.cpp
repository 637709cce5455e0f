// The fake in-process communicator: every collective against closed-form values for worlds of 1, 2
// and 4 ranks (one thread per rank), async ordering, stats, timeouts, mismatches, bad arguments.
#include "tests/support/catch_with_torch.hpp"

#include "runtime/comm/fake_communicator.hpp"
#include "tests/comm/collective_checks.hpp"
#include "tests/comm/failure_checks.hpp"
#include "tests/comm/split_checks.hpp"

using namespace accel::comm;
using namespace accel::test;
using namespace std::chrono_literals;

namespace {


std::vector<std::string> run_fake(int world, const RankBody& body) {
  FakeWorld fake(world, 30s);
  return run_ranks(world, [&](int r) { return fake.communicator(r); }, body);
}

}  // namespace

TEST_CASE("fake: identity", "[fake]") {
  FakeWorld fake(3, 1500ms);
  auto c = fake.communicator(2);
  CHECK(c->rank() == 2);
  CHECK(c->size() == 3);
  CHECK(c->backend_name() == "fake");
  CHECK(c->timeout() == 1500ms);
}

TEST_CASE("fake: all_reduce sum/avg/max over every dtype", "[fake]") {
  const int world = GENERATE(1, 2, 4);
  CAPTURE(world);
  CHECK(run_fake(world, [](Communicator& c) { check_all_reduce_cases(c, kAllTypes); }) == no_errors(world));
}

TEST_CASE("fake: reduce_scatter, even and uneven sizes", "[fake]") {
  const int world = GENERATE(1, 2, 4);
  CAPTURE(world);
  CHECK(run_fake(world, [](Communicator& c) { check_reduce_scatter_cases(c, kMainTypes); }) == no_errors(world));
}

TEST_CASE("fake: all_gather, even and uneven sizes", "[fake]") {
  const int world = GENERATE(1, 2, 4);
  CAPTURE(world);
  CHECK(run_fake(world, [](Communicator& c) { check_all_gather_cases(c, kMainTypes); }) == no_errors(world));
}

TEST_CASE("fake: broadcast from every root", "[fake]") {
  const int world = GENERATE(1, 2, 4);
  CAPTURE(world);
  CHECK(run_fake(world, [](Communicator& c) { check_broadcast_cases(c, kMainTypes); }) == no_errors(world));
}

TEST_CASE("fake: async ops complete in issue order", "[fake]") {
  const int world = GENERATE(1, 2, 4);
  CAPTURE(world);
  CHECK(run_fake(world, check_async_in_order) == no_errors(world));
}

TEST_CASE("fake: tensors that require grad are written without autograd", "[fake]") {
  const int world = GENERATE(1, 2);
  CAPTURE(world);
  CHECK(run_fake(world, check_requires_grad_tensors) == no_errors(world));
}

TEST_CASE("fake: stats count calls and payload bytes", "[fake]") {
  const int world = GENERATE(1, 2, 4);
  CAPTURE(world);
  CHECK(run_fake(world, check_stats) == no_errors(world));
}

TEST_CASE("fake: one thread can drive every rank, since ops are asynchronous", "[fake]") {
  FakeWorld fake(3, 30s);
  std::vector<std::unique_ptr<Communicator>> comms;
  for (int r = 0; r < 3; ++r) comms.push_back(fake.communicator(r));
  std::vector<at::Tensor> tensors;
  std::vector<WorkPtr> works;
  for (int r = 0; r < 3; ++r) {
    tensors.push_back(at::full({4}, static_cast<double>(r + 1), at::kDouble));
    works.push_back(comms[r]->all_reduce(tensors.back(), ReduceOp::Max));
  }
  for (auto& w : works) w->wait();
  for (auto& t : tensors) CHECK(at::equal(t, at::full({4}, 3.0, at::kDouble)));
}

TEST_CASE("fake: invalid arguments are rejected with the op and expected size", "[fake]") {
  FakeWorld fake(2, 30s);
  std::vector<std::unique_ptr<Communicator>> comms;
  comms.push_back(fake.communicator(0));
  comms.push_back(fake.communicator(1));
  check_invalid_inputs(comms);
}

TEST_CASE("fake: a rank that never calls all_reduce makes the other time out", "[fake][timeout]") {
  FakeWorld fake(2, 2000ms);
  auto outcome = run_missing_peer([&](int r) { return fake.communicator(r); });
  check_missing_peer(outcome);
  CHECK_THAT(outcome.first, Contains("rank(s) 1"));
}

TEST_CASE("fake: ranks issuing different collectives fail with a mismatch", "[fake]") {
  FakeWorld fake(2, 30s);
  auto c0 = fake.communicator(0);
  auto c1 = fake.communicator(1);
  at::Tensor a = at::ones({8}), b = at::ones({8});
  auto w0 = c0->all_reduce(a, ReduceOp::Sum);
  auto w1 = c1->broadcast(b, 0);
  std::string m0, m1;
  try { w0->wait(); } catch (const CommError& e) { m0 = e.what(); }
  try { w1->wait(); } catch (const CommError& e) { m1 = e.what(); }
  // Whichever rank arrives second detects the mismatch; the other learns it from the round.
  for (const auto& m : {m0, m1}) {
    CHECK_THAT(m, Contains("mismatch") && Contains("all_reduce(sum, float32, 8 elements)") &&
                      Contains("broadcast(root 0, float32, 8 elements)"));
  }
}

TEST_CASE("fake: each rank gets exactly one communicator", "[fake]") {
  FakeWorld fake(2, 30s);
  auto c0 = fake.communicator(0);
  REQUIRE_THROWS_WITH(fake.communicator(0), Contains("already has a communicator"));
  REQUIRE_THROWS_WITH(fake.communicator(2), Contains("out of range"));
  REQUIRE_THROWS_AS(FakeWorld(0), CommError);
}

TEST_CASE("fake: communicators may outlive their FakeWorld", "[fake]") {
  std::unique_ptr<Communicator> only;
  {
    FakeWorld fake(1, 30s);
    only = fake.communicator(0);
  }
  at::Tensor t = at::arange(5, at::kLong);
  only->all_reduce(t, ReduceOp::Sum)->wait();
  CHECK(at::equal(t, at::arange(5, at::kLong)));
}

TEST_CASE("fake: every waiting rank fails when one rank skips reduce_scatter", "[fake][timeout]") {
  FakeWorld fake(3, 1000ms);
  for (const auto& m : run_reduce_scatter_without_last_rank([&](int r) { return fake.communicator(r); }, 3)) {
    CHECK_THAT(m, Contains("reduce_scatter") && Contains("of 3"));
  }
}

ACCEL_ASSERT_CHECK_IS_CATCH();

TEST_CASE("fake: split forms machine and replica groups (HYBRID_SHARD's layout)", "[fake][split]") {
  CHECK(run_fake(4, check_split_machine_and_replica_groups) == no_errors(4));
}

TEST_CASE("fake: split rejects a negative color", "[fake][split]") {
  auto errors = run_fake(1, [](Communicator& c) { c.split(-1); });
  REQUIRE(errors.size() == 1);
  CHECK_THAT(errors[0], Contains("color must be >= 0"));
}
