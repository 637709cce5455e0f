// The CUDA communicators on a GPU machine (label gpu; skipped without a GPU): NCCL at world 1 on
// GPU 0 and at world N over N GPUs when the machine has several; Gloo staged through host memory
// at worlds 2 and 4 sharing GPU 0 (how the CUDA engine runs at world 2 on a one-GPU machine).
// Ranks are threads of this process, rendezvousing through a shared c10d::HashStore.
#include "tests/support/catch_with_torch.hpp"

#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/cuda.h>

#include <atomic>
#include <cstdlib>

#include "runtime/comm/gloo_communicator.hpp"
#include "runtime/comm/host_staged_communicator.hpp"
#include "runtime/comm/nccl_communicator.hpp"
#include "tests/comm/collective_checks.hpp"
#include "tests/comm/split_checks.hpp"

using namespace accel::comm;
using namespace accel::test;
using namespace std::chrono_literals;

namespace {

std::string fresh_prefix(const char* kind) {
  static std::atomic<int> counter{0};
  return std::string(kind) + std::to_string(counter++);
}

at::Device gpu(int index) { return at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(index)); }

void all_collectives(Communicator& c) {
  check_all_reduce_cases(c, kAllTypes);
  check_reduce_scatter_cases(c, kMainTypes);
  check_all_gather_cases(c, kMainTypes);
  check_broadcast_cases(c, kMainTypes);
  c.barrier()->wait();
}

// World `world` over NCCL, rank r on GPU r.
std::vector<std::string> run_nccl(int world, const RankBody& body) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  const std::string prefix = fresh_prefix("nccl");
  return run_ranks(
      world, [store, world, prefix](int r) { return make_nccl_communicator(store, r, world, 60s, r, prefix); },
      body);
}

// World `world` over Gloo staged through host memory, every rank on GPU 0.
std::vector<std::string> run_staged_on_one_gpu(int world, const RankBody& body) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  const std::string prefix = fresh_prefix("staged");
  return run_ranks(
      world,
      [store, world, prefix](int r) {
        return make_host_staged_communicator(make_gloo_communicator(store, r, world, 60s, "127.0.0.1", prefix), gpu(0));
      },
      body);
}

}  // namespace

TEST_CASE("nccl: this build has the NCCL communicator", "[gpu][nccl]") {
  REQUIRE(nccl_communicator_built());
}

TEST_CASE("nccl: world 1 on GPU 0, every collective", "[gpu][nccl]") {
  CHECK(run_nccl(1, [](Communicator& c) {
          if (c.device() != gpu(0) || c.backend_name() != "nccl") fail("nccl communicator on cuda:0");
          all_collectives(c);
        }) == no_errors(1));
}

// The test switch of nccl_communicator.hpp: at world 1 every op is sent through NCCL on its stream,
// into buffers padded by one element, and copied out on the caller's stream, as at world > 1.
TEST_CASE("nccl: world 1 issuing every op through NCCL, padded (ACCEL_NCCL_ISSUE_AT_WORLD_ONE)", "[gpu][nccl]") {
  ::setenv("ACCEL_NCCL_ISSUE_AT_WORLD_ONE", "1", 1);
  REQUIRE(nccl_issues_at_world_one());
  const auto errors = run_nccl(1, all_collectives);
  ::unsetenv("ACCEL_NCCL_ISSUE_AT_WORLD_ONE");
  CHECK(errors == no_errors(1));
}

TEST_CASE("nccl: one rank per GPU, every collective and split", "[gpu][nccl]") {
  const int gpus = static_cast<int>(torch::cuda::device_count());
  if (gpus < 2) {
    WARN("only " << gpus << " GPU: NCCL at world > 1 needs one GPU per rank (not run)");
    return;
  }
  const int world = std::min(gpus, 4);
  CHECK(run_nccl(world, all_collectives) == no_errors(world));
  if (world == 4) CHECK(run_nccl(4, check_split_machine_and_replica_groups) == no_errors(4));
}

TEST_CASE("nccl: a tensor on the CPU is refused naming the device", "[gpu][nccl]") {
  CHECK(run_nccl(1, [](Communicator& c) {
          try {
            c.all_reduce(at::ones({4}), ReduceOp::Sum);
          } catch (const CommError& e) {
            if (std::string(e.what()).find("tensors on cuda:0") == std::string::npos) throw;
            return;
          }
          fail("a CPU tensor was accepted by the NCCL communicator");
        }) == no_errors(1));
}

TEST_CASE("gloo-staged: worlds 2 and 4 sharing GPU 0, every collective", "[gpu][staged]") {
  const int world = GENERATE(2, 4);
  CAPTURE(world);
  CHECK(run_staged_on_one_gpu(world, [](Communicator& c) {
          if (c.device() != gpu(0) || c.backend_name() != "gloo-staged") fail("staged communicator on cuda:0");
          all_collectives(c);
        }) == no_errors(world));
  if (world == 4) CHECK(run_staged_on_one_gpu(4, check_split_machine_and_replica_groups) == no_errors(4));
}

ACCEL_ASSERT_CHECK_IS_CATCH();
