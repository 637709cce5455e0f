// The memory estimator's arithmetic (runtime/estimate/memory_estimate.hpp): the ZeRO paper's
// formulas, accel's per-stage bytes for small cases computed by hand (padding included), offload,
// world 1, unknown units and input errors.
#include <catch2/catch.hpp>

#include "runtime/common/errors.hpp"
#include "runtime/estimate/memory_estimate.hpp"

using namespace accel::estimate;

namespace {

// Units of 10 (tied, like the embedding), 6, 3 and 7 values: 26 parameters.
MemoryInput small_fp32() {
  MemoryInput in;
  in.unit_numels = {10, 6, 3, 7};
  in.tied_unit = 0;
  in.param_bytes = 4;
  in.state_bytes = 8;  // adamw
  return in;
}

MemoryEstimate run(const MemoryInput& in, Sharding sharding, int shards, Placement offload = Placement::device) {
  return estimate_memory(in, StrategyPlan{"test", sharding, shards, offload, false});
}

int64_t movable(const MemoryEstimate& e) { return e.master + e.optimizer_states + e.grad_shard; }

}  // namespace

TEST_CASE("the ZeRO paper's per-rank figures (K = 12)", "[estimate]") {
  const int64_t psi = 1000;
  CHECK(zero_paper_bytes(Sharding::replicated, psi, 4) == 16000);
  CHECK(zero_paper_bytes(Sharding::optimizer, psi, 4) == 4000 + 3000);
  CHECK(zero_paper_bytes(Sharding::gradients, psi, 4) == 2000 + 3500);
  CHECK(zero_paper_bytes(Sharding::parameters, psi, 4) == 4000);
  // The paper's 7.5B example at N = 64: 120 GB, 31.4 GB, 16.6 GB, 1.9 GB.
  const int64_t big = 7'500'000'000;
  CHECK(zero_paper_bytes(Sharding::replicated, big, 64) == 120'000'000'000);
  CHECK(zero_paper_bytes(Sharding::optimizer, big, 64) == 31'406'250'000);
  CHECK(zero_paper_bytes(Sharding::gradients, big, 64) == 16'640'625'000);
  CHECK(zero_paper_bytes(Sharding::parameters, big, 64) == 1'875'000'000);
  for (auto s : {Sharding::replicated, Sharding::optimizer, Sharding::gradients, Sharding::parameters})
    CHECK(zero_paper_bytes(s, psi, 1) == 16 * psi);
  CHECK(zero_paper_bytes(Sharding::parameters, 10, 3) == 54);  // 160 / 3 rounds up
}

TEST_CASE("flat buffers pad to a multiple of the shard count", "[estimate]") {
  CHECK(padded_numel(10, 4) == 12);
  CHECK(padded_numel(12, 4) == 12);
  CHECK(padded_numel(1, 4) == 4);
  CHECK(padded_numel(10, 1) == 10);
}

TEST_CASE("accel's bytes per stage for a hand-computed fp32 case with padding", "[estimate]") {
  // World 4: units pad to 12, 8, 4, 8 (sum 32), shards 3, 2, 1, 2 (sum 8). 26 parameters.
  MemoryInput in = small_fp32();

  SECTION("replicated: 16 bytes per parameter, no padding") {
    auto e = run(in, Sharding::replicated, 1);
    CHECK(e.params == 26 * 4);
    CHECK(e.grads == 26 * 4);
    CHECK(e.master == 0);
    CHECK(e.optimizer_states == 26 * 8);
    CHECK(e.live_params + e.live_grads == 0);
    CHECK(e.device == 16 * 26);
    CHECK(e.zero_paper == 16 * 26);
  }
  SECTION("zero-1: replicated params and padded flat gradients; fp32 grad and state shards") {
    auto e = run(in, Sharding::optimizer, 4);
    CHECK(e.params == 104);
    CHECK(e.grads == 32 * 4);
    CHECK(e.grad_shard == 8 * 4);
    CHECK(e.master == 0);  // fp32: the master shard is the parameters' own slice, stepped in place
    CHECK(e.optimizer_states == 8 * 8);
    CHECK(e.live_params == 0);  // the refresh all-gathers write into the parameters' own storage
    CHECK(e.live_grads == 0);
    CHECK(e.device == 104 + 128 + 32 + 64);
    CHECK(e.zero_paper == 4 * 26 + 78);
  }
  SECTION("zero-2: no replicated gradients; the tied unit's and the largest other unit's gradient buffers") {
    auto e = run(in, Sharding::gradients, 4);
    CHECK(e.params == 104);
    CHECK(e.grads == 0);
    CHECK(e.grad_shard == 32);
    CHECK(e.master == 0);
    CHECK(e.optimizer_states == 64);
    CHECK(e.live_grads == (12 + 8) * 4);
    CHECK(e.live_params == 0);
    CHECK(e.device == 104 + 32 + 64 + 80);
    CHECK(e.zero_paper == 2 * 26 + 91);
  }
  SECTION("zero-3: shards only, plus the gathered tied unit and largest other unit") {
    auto e = run(in, Sharding::parameters, 4);
    CHECK(e.params == 0);
    CHECK(e.grads == 0);
    CHECK(e.grad_shard + e.master + e.optimizer_states == 8 * 16);
    CHECK(e.live_params == (12 + 8) * 4);
    CHECK(e.live_grads == (12 + 8) * 4);
    CHECK(e.device == 128 + 160);
    CHECK(e.zero_paper == 104);
  }
  SECTION("zero-3 with more live units counts the next largest ones") {
    in.max_live_units = 3;
    CHECK(run(in, Sharding::parameters, 4).live_params == (12 + 8 + 8) * 4);
    in.max_live_units = 1;  // the computing unit is always gathered
    CHECK(run(in, Sharding::parameters, 4).live_params == (12 + 8) * 4);
  }
}

TEST_CASE("mixed precision: 2-byte parameters and gradients, an fp32 master copy when replicated", "[estimate]") {
  MemoryInput in = small_fp32();
  in.param_bytes = 2;
  in.replicated_master = true;
  auto rep = run(in, Sharding::replicated, 1);
  CHECK(rep.params == 52);
  CHECK(rep.grads == 52);
  CHECK(rep.master == 104);
  CHECK(rep.grad_shard == 104);  // the fp32 gradient the update reads, beside the fp32 master
  CHECK(rep.device == 20 * 26);  // the paper's 16 bytes per parameter, plus that fp32 gradient
  auto z3 = run(in, Sharding::parameters, 4);
  CHECK(z3.master == 32);  // master, gradient and state shards stay fp32
  CHECK(z3.grad_shard == 32);
  CHECK(z3.live_params == 20 * 2);
  CHECK(z3.live_grads == 20 * 2);
  auto z1 = run(in, Sharding::optimizer, 4);
  CHECK(z1.grads == 32 * 2);
}

TEST_CASE("sgd keeps one fp32 state with momentum and none without", "[estimate]") {
  MemoryInput in = small_fp32();
  in.state_bytes = 4;
  CHECK(run(in, Sharding::replicated, 1).optimizer_states == 26 * 4);
  CHECK(run(in, Sharding::optimizer, 4).optimizer_states == 8 * 4);
  in.state_bytes = 0;
  CHECK(run(in, Sharding::parameters, 4).optimizer_states == 0);
}

TEST_CASE("offload moves the master, states and gradient shard off the device", "[estimate]") {
  MemoryInput in = small_fp32();
  for (auto sharding : {Sharding::optimizer, Sharding::gradients, Sharding::parameters}) {
    auto on = run(in, sharding, 4);
    auto cpu = run(in, sharding, 4, Placement::cpu);
    // Offloaded, the master is a copy of its own even at stages 1-2 (in memory there it is the
    // parameters' slice): 8 shard values of master, two moments and gradient move.
    CHECK(cpu.master == 8 * 4);
    CHECK(cpu.host == 8 * (4 + 8 + 4));
    // Gathers read a compute-dtype copy of the shard, which stays on the device: the master
    // lives apart (without offload, an fp32 master is that copy).
    CHECK(cpu.param_shard == 8 * 4);
    CHECK(cpu.device == on.device - movable(on) + cpu.param_shard);
    CHECK(cpu.nvme == 0);
    CHECK(cpu.params == on.params);
    CHECK(cpu.live_params + cpu.live_grads == on.live_params + on.live_grads);
    auto nvme = run(in, sharding, 4, Placement::nvme);
    CHECK(nvme.nvme == 8 * (4 + 8 + 4));  // master, moments and gradient shard in files
    // The same copy while the master is in a file.
    CHECK(nvme.param_shard == 8 * 4);
    CHECK(nvme.device == cpu.device);
    // 4 units (fewer than buffer_count 5) of at most 3 shard values stream through one buffer
    // each, holding master + 2 moments + gradient (16 bytes a value).
    CHECK(nvme.host == 4 * 3 * (4 + 8 + 4));
  }
  in.nvme_buffer_count = 2;
  auto two = run(in, Sharding::parameters, 4, Placement::nvme);
  CHECK(two.host == 2 * 3 * (4 + 8 + 4));
  // Replicated with offload (FSDP NO_SHARD + offload_params): the states (and master) move.
  auto rep = run(in, Sharding::replicated, 1, Placement::cpu);
  CHECK(rep.host == 26 * 8);
  CHECK(rep.device == 26 * 8);
}

TEST_CASE("parameter offload to nvme moves the stage-3 parameter shard into files", "[estimate]") {
  MemoryInput in = small_fp32();  // at 4 shards: sum(S) = 3 + 2 + 1 + 2 = 8, the largest S 3
  auto plan = [&](Sharding sharding, Placement offload, Placement params) {
    StrategyPlan p{"test", sharding, 4, offload, false};
    p.param_offload = params;
    return estimate_memory(in, p);
  };
  const Sharding z3 = Sharding::parameters;
  const Placement device = Placement::device, nvme = Placement::nvme;
  in.param_bytes = 2;  // bf16: a bf16 copy of the shard is the gather source
  auto on = plan(z3, device, device), files = plan(z3, device, nvme);
  CHECK(on.param_shard == 8 * 2);
  CHECK(files.param_shard == 8 * 2);
  CHECK(files.nvme == 8 * 2);
  CHECK(files.device == on.device - 8 * 2);
  CHECK(files.host == 4 * 3 * 2);  // 4 units (< buffer_count 5): a staging buffer each, of the largest shard
  auto opt = plan(z3, nvme, device), both = plan(z3, nvme, nvme);
  CHECK(both.nvme == opt.nvme + 8 * 2);
  CHECK(both.device == opt.device - 8 * 2);
  CHECK(both.host == opt.host + 4 * 3 * 2);
  in.nvme_buffer_count = 2;
  CHECK(plan(z3, device, nvme).host == 2 * 3 * 2);
  in.nvme_buffer_count = 5;
  // Stages 1-2 keep their parameters whole: nothing moves.
  CHECK(plan(Sharding::gradients, device, nvme).device == plan(Sharding::gradients, device, device).device);
  CHECK(plan(Sharding::gradients, device, nvme).nvme == 0);

  in.param_bytes = 4;
  // fp32 beside nvme masters: the gathers read the master's file, so the in-memory copy goes and
  // no second file is written.
  auto fp32_opt = plan(z3, nvme, device), fp32_both = plan(z3, nvme, nvme);
  CHECK(fp32_opt.param_shard == 8 * 4);
  CHECK(fp32_both.param_shard == 0);
  CHECK(fp32_both.nvme == fp32_opt.nvme);
  CHECK(fp32_both.device == fp32_opt.device - 8 * 4);
  CHECK(fp32_both.host == fp32_opt.host + 4 * 3 * 4);
  // fp32 with the masters in memory: the masters are the shards' values; the files are a second
  // copy and nothing leaves the device.
  auto fp32_on = plan(z3, device, device), fp32_files = plan(z3, device, nvme);
  CHECK(fp32_files.device == fp32_on.device);
  CHECK(fp32_files.nvme == 8 * 4);
  CHECK(fp32_files.param_shard == 8 * 4);
}

TEST_CASE("stage 3's kept units gather from their own slice: param_shard counts the partitioned units",
          "[estimate]") {
  // With a replay the kept units are known: here the tied unit (10 values, 12 padded at 4 shards:
  // a shard of 3) stays gathered. Its shard is its slice of `params`, so of sum(S) = 8 only the
  // partitioned units' 5 are held apart, in memory, files or host memory alike.
  MemoryInput in = small_fp32();
  auto plan = [&](Placement offload, Placement params) {
    StrategyPlan p{"test", Sharding::parameters, 4, offload, false};
    p.param_offload = params;
    StepReplay replay;
    replay.kept = 12 * in.param_bytes;
    replay.kept_numel = 12;
    replay.largest_freed_numel = 8;
    p.step = replay;
    return estimate_memory(in, p);
  };
  const Placement device = Placement::device, cpu = Placement::cpu, nvme = Placement::nvme;
  in.param_bytes = 2;
  auto on = plan(device, device);
  CHECK(on.params == 12 * 2);
  CHECK(on.param_shard == 5 * 2);
  CHECK(on.device == on.params + on.param_shard + on.live_params + on.live_grads + movable(on));
  auto files = plan(device, nvme);
  CHECK(files.param_shard == 5 * 2);
  CHECK(files.nvme == 5 * 2);  // only the partitioned units have files
  CHECK(files.device == on.device - 5 * 2);
  auto host = plan(cpu, cpu);
  CHECK(host.param_shard == 5 * 2);
  CHECK(host.host == movable(host) + 5 * 2);
  CHECK(host.device == host.params + host.live_params + host.live_grads);  // no shard stays on the device
  // fp32 beside offloaded masters: the partitioned units' copies (or the masters' files), none of the root.
  in.param_bytes = 4;
  CHECK(plan(nvme, device).param_shard == 5 * 4);
  CHECK(plan(cpu, device).param_shard == 5 * 4);
  auto both = plan(nvme, nvme);
  CHECK(both.param_shard == 0);
  CHECK(both.peak - both.transients == both.params);  // the states in memory: the kept root alone
  // fp32 with the masters in memory: the root's master is its slice too, and there is no copy.
  auto fp32_on = plan(device, device);
  CHECK(fp32_on.param_shard == 0);
  CHECK(fp32_on.master == (8 - 3) * 4);
}

TEST_CASE("world 1 degenerates: no padding, every stage holds 16 bytes of states per parameter", "[estimate]") {
  MemoryInput in = small_fp32();
  for (auto sharding : {Sharding::optimizer, Sharding::gradients, Sharding::parameters}) {
    auto e = run(in, sharding, 1);
    CHECK(e.grad_shard == 26 * 4);
    // Stages 1-2 keep fp32 parameters whole and step them as the master; stage 3's shard is the master.
    CHECK(e.master + e.params == 26 * 4);
    CHECK(e.optimizer_states == 26 * 8);
    CHECK(e.zero_paper == 16 * 26);
  }
  CHECK(run(in, Sharding::optimizer, 1).grads == 26 * 4);
  CHECK(run(in, Sharding::parameters, 1).live_params == (10 + 7) * 4);
  // Stage 1 at world 1 keeps everything ddp keeps plus the gradient shard copy.
  CHECK(run(in, Sharding::optimizer, 1).device == run(in, Sharding::replicated, 1).device + 26 * 4);
}

TEST_CASE("a bare parameter count pads one buffer, and live buffers need a unit size", "[estimate]") {
  MemoryInput in;
  in.total_params = 1000;
  auto z3 = run(in, Sharding::parameters, 8);
  CHECK_FALSE(z3.unit_buffers_estimated);
  CHECK(z3.live_params + z3.live_grads == 0);
  CHECK(z3.master == 125 * 4);
  CHECK(run(in, Sharding::replicated, 1).unit_buffers_estimated);
  CHECK(run(in, Sharding::optimizer, 3).grads == 1002 * 4);

  in.unit_params = 100;  // pads to 104 at world 8
  z3 = run(in, Sharding::parameters, 8);
  CHECK(z3.unit_buffers_estimated);
  CHECK(z3.live_params == 2 * 104 * 4);
  CHECK(z3.live_grads == 104 * 4);
  // nvme: buffer_count buffers of the largest shard's master + moments + gradient (the gradient
  // shard itself, 125 values, is in the files).
  auto nvme8 = run(in, Sharding::parameters, 8, Placement::nvme);
  CHECK(nvme8.host == 5 * 13 * (4 + 8 + 4));
  CHECK(nvme8.nvme == nvme8.master + nvme8.optimizer_states + 125 * 4);
}

TEST_CASE("inputs that describe no model are usage errors", "[estimate]") {
  MemoryInput in;
  in.total_params = 0;
  CHECK_THROWS_AS(check_input(in), accel::UsageError);
  in.total_params = -1;
  CHECK_THROWS_WITH(check_input(in), Catch::Contains("must be positive"));
  in.total_params = 100;
  CHECK_NOTHROW(check_input(in));
  in.unit_params = 200;
  CHECK_THROWS_AS(check_input(in), accel::UsageError);
  MemoryInput units = small_fp32();
  units.unit_numels[1] = 0;
  CHECK_THROWS_AS(check_input(units), accel::UsageError);
  CHECK_THROWS_WITH(run(small_fp32(), Sharding::parameters, 0), Catch::Contains("at least one shard"));
}
