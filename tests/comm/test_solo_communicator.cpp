// The communicator of a world of one rank (a program run without `accel launch`): every collective
// against the closed-form values the other communicators are checked against at world 1, stats,
// argument errors, and split.
#include "tests/support/catch_with_torch.hpp"

#include "runtime/comm/solo_communicator.hpp"
#include "tests/comm/collective_checks.hpp"

using namespace accel::comm;
using namespace accel::test;
using namespace std::chrono_literals;

namespace {

// Runs `body` on the solo communicator and returns its failures (none: {""}, as run_ranks does).
std::vector<std::string> run_solo(const RankBody& body) {
  return run_ranks(1, [](int) { return make_solo_communicator(); }, body);
}

}  // namespace

TEST_CASE("solo: identity", "[solo]") {
  auto c = make_solo_communicator(1500ms);
  CHECK(c->rank() == 0);
  CHECK(c->size() == 1);
  CHECK(c->backend_name() == "solo");
  CHECK(c->timeout() == 1500ms);
  CHECK(c->device() == at::Device(at::kCPU));
}

TEST_CASE("solo: every collective gives a world of one's values, every dtype and size", "[solo]") {
  CHECK(run_solo([](Communicator& c) { check_all_reduce_cases(c, kAllTypes); }) == no_errors(1));
  CHECK(run_solo([](Communicator& c) { check_reduce_scatter_cases(c, kMainTypes); }) == no_errors(1));
  CHECK(run_solo([](Communicator& c) { check_all_gather_cases(c, kMainTypes); }) == no_errors(1));
  CHECK(run_solo([](Communicator& c) { check_broadcast_cases(c, kMainTypes); }) == no_errors(1));
  CHECK(run_solo(check_async_in_order) == no_errors(1));
  CHECK(run_solo(check_requires_grad_tensors) == no_errors(1));
  CHECK(run_solo(check_stats) == no_errors(1));
}

TEST_CASE("solo: bad arguments are refused as by every communicator", "[solo]") {
  auto c = make_solo_communicator();
  CHECK_THROWS_WITH(c->all_gather(at::ones({5}), at::empty({6})),
                    Catch::Matchers::Contains("all_gather") && Catch::Matchers::Contains("expected 6"));
  CHECK_THROWS_WITH(c->reduce_scatter(at::ones({4}), at::empty({4}, at::kDouble), ReduceOp::Sum),
                    Catch::Matchers::Contains("float32") && Catch::Matchers::Contains("float64"));
  CHECK_THROWS_WITH(c->all_reduce(at::ones({4}, at::kChar), ReduceOp::Sum), Catch::Matchers::Contains("not supported"));
  CHECK_THROWS_AS(c->broadcast(at::ones({3}), 1), CommError);
  CHECK_THROWS_AS(c->split(-1), CommError);
}

TEST_CASE("solo: split gives a world of one and costs the parent one all_gather", "[solo]") {
  auto c = make_solo_communicator(900ms);
  auto group = c->split(3);
  CHECK(group->size() == 1);
  CHECK(group->rank() == 0);
  CHECK(group->timeout() == 900ms);
  CHECK(c->stats().of(CollectiveKind::AllGather).calls == 1);
  at::Tensor x = at::arange(7, at::kFloat);
  group->all_reduce(x, ReduceOp::Avg)->wait();
  CHECK(at::equal(x, at::arange(7, at::kFloat)));
}
