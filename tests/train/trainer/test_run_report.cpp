// The run report's communication figures: per-step traffic summed over the world and the backend's
// groups, each at its own size (HYBRID_SHARD's machine and replica groups), so that bench_zero can
// set a hybrid run's bytes beside theory.
#include <catch2/catch.hpp>

#include "trainer/run_report.hpp"

using accel::comm::CollectiveKind;
using accel::comm::CommStats;
using accel::train::make_run_report;
using accel::train::StepCommCounter;
using Catch::Matchers::WithinRel;

namespace {

CommStats with(CollectiveKind kind, int calls, int64_t bytes_per_call) {
  CommStats s;
  for (int i = 0; i < calls; ++i) s.record(kind, bytes_per_call);
  return s;
}

}  // namespace

TEST_CASE("run report: each group's bus bytes use the group's own size", "[run_report]") {
  StepCommCounter counter;
  const CommStats none;
  // Two steps. World of 4: one barrier (no bytes). Machine group of 2: 3 gathers of 1000 bytes.
  // Replica group of 2: one all-reduce of 500 bytes.
  for (int step = 0; step < 2; ++step) {
    counter.add("world", 4, none, with(CollectiveKind::Barrier, 1, 0));
    counter.add("shard_group", 2, none, with(CollectiveKind::AllGather, 3, 1000));
    counter.add("replica_group", 2, none, with(CollectiveKind::AllReduce, 1, 500));
  }
  REQUIRE(counter.groups().size() == 3);
  const auto report = make_run_report(0, 4, "fsdp", nlohmann::json::object(), counter, 2, 0);
  const auto& c = report["comm_per_step"];
  // Per step: gathers 3 x 1000 x (2-1)/2 = 1500; all-reduce 500 x 2(2-1)/2 = 500. At the world's
  // size (4) the gathers would count 2250 and the all-reduce 750: the test tells them apart.
  CHECK_THAT(c["bus_bytes"].get<double>(), WithinRel(2000.0, 1e-12));
  CHECK_THAT(c["by_group"]["shard_group"]["bus_bytes"].get<double>(), WithinRel(1500.0, 1e-12));
  CHECK(c["by_group"]["shard_group"]["size"] == 2);
  CHECK_THAT(c["by_group"]["replica_group"]["bus_bytes"].get<double>(), WithinRel(500.0, 1e-12));
  CHECK(c["by_group"]["world"]["bus_bytes"].get<double>() == 0.0);
  CHECK_THAT(c["by_kind"]["all_gather"]["calls"].get<double>(), WithinRel(3.0, 1e-12));
  CHECK_THAT(c["by_kind"]["all_gather"]["payload_bytes"].get<double>(), WithinRel(3000.0, 1e-12));
  CHECK_THAT(c["by_kind"]["all_reduce"]["bus_bytes"].get<double>(), WithinRel(500.0, 1e-12));
  CHECK_THAT(c["by_kind"]["barrier"]["calls"].get<double>(), WithinRel(1.0, 1e-12));
}

TEST_CASE("run report: counts are differences between snapshots", "[run_report]") {
  StepCommCounter counter;
  const CommStats before = with(CollectiveKind::ReduceScatter, 5, 100);
  CommStats after = before;
  after.record(CollectiveKind::ReduceScatter, 400);
  // The step's own bus bytes (metrics.jsonl's comm_bytes): 400 x (2-1)/2, not the 900 counted since start.
  CHECK(counter.add("world", 2, before, after) == 200.0);
  const auto report = make_run_report(1, 2, "deepspeed", nlohmann::json::object(), counter, 1, 0);
  CHECK_THAT(report["comm_per_step"]["bus_bytes"].get<double>(), WithinRel(200.0, 1e-12));
  CHECK_THAT(report["comm_per_step"]["by_kind"]["reduce_scatter"]["calls"].get<double>(), WithinRel(1.0, 1e-12));
}
