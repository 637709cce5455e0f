// Rank body for split(): a world of 4 as 2 "machines" x 2 local ranks, the HYBRID_SHARD grouping.
// Checks each group's rank and size, closed-form collectives inside each group (which must not
// mix with the other group), the parent still working afterwards, and per-communicator stats.
#pragma once

#include <string>

#include "tests/comm/collective_checks.hpp"

namespace accel::test {

inline void check_split_machine_and_replica_groups(comm::Communicator& world) {
  const int r = world.rank(), per_machine = 2;
  if (world.size() != 4) fail("check_split_machine_and_replica_groups needs a world of 4");
  const auto gathers_before = world.stats().of(comm::CollectiveKind::AllGather).calls;
  auto machine = world.split(r / per_machine);   // {0,1}, {2,3}: shard groups
  auto replica = world.split(r % per_machine);   // {0,2}, {1,3}: replica groups
  const std::string where = "split on world rank " + std::to_string(r);
  if (machine->size() != 2 || machine->rank() != r % per_machine)
    fail(where + ": machine group rank/size " + std::to_string(machine->rank()) + "/" + std::to_string(machine->size()));
  if (replica->size() != 2 || replica->rank() != r / per_machine)
    fail(where + ": replica group rank/size " + std::to_string(replica->rank()) + "/" + std::to_string(replica->size()));
  if (world.stats().of(comm::CollectiveKind::AllGather).calls != gathers_before + 2)
    fail(where + ": each split costs the parent one all_gather");

  // Sum of (q + 1) * i over the group's world ranks q: machine m holds 2m, 2m+1; replica l holds l, l+2.
  const int n = 1001;
  const int m = r / per_machine, l = r % per_machine;
  auto ramp = [n](double factor) {
    std::vector<double> v;
    for (int i = 0; i < n; ++i) v.push_back(i * factor);
    return v;
  };
  at::Tensor t = contribution(r, n, at::kDouble).to(world.device());
  machine->all_reduce(t, comm::ReduceOp::Sum)->wait();
  expect_values(t, ramp((2 * m + 1) + (2 * m + 2)), 0.0, where + ": all_reduce in the machine group");
  at::Tensor u = contribution(r, n, at::kDouble).to(world.device());
  replica->all_reduce(u, comm::ReduceOp::Sum)->wait();
  expect_values(u, ramp((l + 1) + (l + 3)), 0.0, where + ": all_reduce in the replica group");

  // HYBRID_SHARD's gradient path: reduce-scatter (avg) in the machine, then all-reduce (avg) of
  // the shard across machines, equals a reduce-scatter (avg) over the world of the same shard
  // split: here every rank ends with the world average of its machine shard.
  at::Tensor input = contribution(r, n, at::kDouble).to(world.device());
  const comm::ShardRange shard = comm::shard_range(n, machine->size(), machine->rank());
  at::Tensor out = at::empty({shard.size()}, at::TensorOptions().dtype(at::kDouble).device(world.device()));
  machine->reduce_scatter(input, out, comm::ReduceOp::Avg)->wait();
  replica->all_reduce(out, comm::ReduceOp::Avg)->wait();
  std::vector<double> avg;
  for (int64_t i = shard.begin; i < shard.end; ++i) avg.push_back(double(i) * (1 + 2 + 3 + 4) / 4.0);
  expect_values(out, avg, 1e-12, where + ": machine reduce_scatter + replica all_reduce");

  check_all_gather_cases(*machine, {at::kFloat});
  check_all_reduce_cases(world, {at::kFloat});  // the parent is still usable
  if (replica->stats().of(comm::CollectiveKind::AllReduce).calls != 2 ||
      machine->stats().of(comm::CollectiveKind::ReduceScatter).calls != 1)
    fail(where + ": each group counts its own collectives");
}

}  // namespace accel::test
