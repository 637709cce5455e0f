// NVMe optimizer offload: the state store streams units through a bounded buffer pool (read ahead,
// write behind) and keeps every unit's values; a sharded optimizer whose states live in files
// updates exactly like one that keeps them in memory. End to end (accel launch, agreement with the
// reference and resident memory): tests/numerics/test_trainer_end_to_end.py, scripts/bench_zero.py --offload nvme.
#include "tests/support/catch_with_torch.hpp"

#include <filesystem>

#include "engine/format/safetensors.hpp"
#include "engine/sharded/nvme_state_store.hpp"
#include "engine/sharded/sharded_optimizer.hpp"
#include "runtime/config/job.hpp"
#include "tests/support/temp_dir.hpp"

using namespace accel::engine;

TEST_CASE("nvme store: every unit streams through the pool and is written back, for any buffer count",
          "[offload]") {
  accel::test::TempDir dir;
  const std::vector<int64_t> sizes = {5, 17, 1, 64, 3, 40, 9};
  for (int buffers : {1, 2, 3, 5, 16}) {
    INFO("buffer_count " << buffers);
    std::string scratch;
    {
      NvmeStateStore store(dir.path().string(), 0, buffers);
      scratch = store.directory();
      for (size_t u = 0; u < sizes.size(); ++u) {
        store.add_unit("u" + std::to_string(u), sizes[u]);
        store.write(int(u), at::arange(sizes[u], at::kFloat) + float(100 * u));
      }
      CHECK(store.bytes_on_disk() == 4 * (5 + 17 + 1 + 64 + 3 + 40 + 9));
      CHECK(store.buffer_bytes() == 4 * 64 * std::min<int64_t>(std::max(2, buffers), int64_t(sizes.size())));
      for (int round = 1; round <= 3; ++round) {
        std::vector<int> seen;
        store.for_each_unit(
            [&](int u, at::Tensor& values) {
              seen.push_back(u);
              REQUIRE(values.numel() == sizes[size_t(u)]);
              // What the previous round wrote back is what this round reads.
              at::Tensor expected = at::arange(sizes[size_t(u)], at::kFloat) + float(100 * u + (round - 1));
              CHECK(at::equal(values, expected));
              values.add_(1);
            },
            /*write_back=*/true);
        CHECK(seen == std::vector<int>{0, 1, 2, 3, 4, 5, 6});
      }
      store.for_each_unit([](int, at::Tensor& v) { v.zero_(); }, /*write_back=*/false);  // read-only pass
      CHECK(at::equal(store.read(3), at::arange(64, at::kFloat) + 303));
    }
    CHECK_FALSE(std::filesystem::exists(scratch));  // scratch files go with the store
  }
}

TEST_CASE("nvme store: a failure inside the stream propagates after in-flight I/O has drained", "[offload]") {
  accel::test::TempDir dir;
  NvmeStateStore store(dir.path().string(), 1, 3);
  for (int u = 0; u < 6; ++u) store.add_unit("u" + std::to_string(u), 32);
  CHECK_THROWS_WITH(store.for_each_unit(
                        [](int u, at::Tensor&) {
                          if (u == 2) throw std::runtime_error("boom");
                        },
                        true),
                    "boom");
  // The store is still usable afterwards.
  store.write(0, at::ones({32}));
  CHECK(at::equal(store.read(0), at::ones({32})));
}

TEST_CASE("nvme store: a new unit reads as zeros, and a part of a unit can be written in place", "[offload]") {
  accel::test::TempDir dir;
  NvmeStateStore store(dir.path().string(), 0, 2);
  store.add_unit("u", 12);
  CHECK(at::equal(store.read(0), at::zeros({12})));
  store.write(0, at::full({4}, 2.0f), 4);
  store.write(0, at::full({4}, 3.0f), 8);
  CHECK(at::equal(store.read(0), at::cat({at::zeros({4}), at::full({4}, 2.0f), at::full({4}, 3.0f)})));
  CHECK_THROWS_WITH(store.write(0, at::ones({4}), 9), Catch::Contains("holds 12 fp32 values"));
  CHECK_THROWS_WITH(store.write(0, at::ones({4}, at::kDouble)), Catch::Contains("holds 12 fp32 values"));
}

namespace {

// Two AdamW units (one with a parameter in the no-decay group 1) over 2 shards, as the engine adds them.
void add_two_units(ShardedOptimizer& opt) {
  static const FlatLayout a({6, 10}, 2), b({7}, 2);
  opt.add_unit("a", a, {0, 1}, at::linspace(-1, 1, a.shard_numel()));
  opt.add_unit("b", b, {0}, at::linspace(0, 2, b.shard_numel()));
}

accel::config::OptimizerSection adamw_with_decay() {
  accel::config::OptimizerSection section;  // adamw defaults
  section.weight_decay = 0.1;
  return section;
}

void set_grads(ShardedOptimizer& opt, int step) {
  for (auto& u : opt.units()) u.grad.copy_(at::linspace(-0.5, 0.5 + step, u.grad.numel()));
}

// Every state tensor (after materialize) equal, name by name.
void check_same_states(ShardedOptimizer& on_disk, ShardedOptimizer& in_memory) {
  on_disk.materialize();
  auto disk = on_disk.state_tensors(), memory = in_memory.state_tensors();
  REQUIRE(disk.size() == memory.size());
  for (size_t i = 0; i < disk.size(); ++i) {
    INFO(disk[i].first);
    CHECK(disk[i].first == memory[i].first);
    CHECK(at::equal(disk[i].second, memory[i].second));
  }
}

}  // namespace

TEST_CASE("sharded optimizer: units added after offloading start like units in memory", "[offload]") {
  // The engine offloads first and adds units after, so that no unit's states are ever all in
  // memory: each master goes straight to its file and the moments are the file's zeros.
  accel::test::TempDir dir;
  const auto section = adamw_with_decay();
  ShardedOptimizer in_memory(section, 1), on_disk(section, 1);
  on_disk.offload_to_nvme(dir.path().string(), 2);
  add_two_units(in_memory);
  add_two_units(on_disk);
  for (const auto& u : on_disk.units()) {
    CHECK_FALSE(u.master.defined());
    CHECK_FALSE(u.exp_avg.defined());
  }
  for (int step = 0; step < 3; ++step) {
    set_grads(in_memory, step);
    set_grads(on_disk, step);
    on_disk.step(1e-2);
    in_memory.step(1e-2);
  }
  check_same_states(on_disk, in_memory);
}

TEST_CASE("sharded optimizer: states in files update exactly like states in memory", "[offload]") {
  accel::test::TempDir dir;
  const auto section = adamw_with_decay();
  ShardedOptimizer in_memory(section, 1), on_disk(section, 1);
  add_two_units(in_memory);
  add_two_units(on_disk);
  on_disk.offload_to_nvme(dir.path().string(), 2);
  CHECK_FALSE(on_disk.units()[0].master.defined());  // between steps the states are only in files
  // The kinds a checkpoint layout records come from the configuration, not from tensors in memory.
  CHECK(on_disk.state_kinds() == std::vector<std::string>{"exp_avg", "exp_avg_sq"});
  for (int step = 0; step < 4; ++step) {
    set_grads(in_memory, step);
    set_grads(on_disk, step);
    std::vector<at::Tensor> seen;
    on_disk.step(1e-2, [&](int, UnitShardState& u) { seen.push_back(u.master.clone()); });
    in_memory.step(1e-2);
    REQUIRE(seen.size() == 2);
    CHECK(at::equal(seen[0], in_memory.units()[0].master));
    CHECK(at::equal(seen[1], in_memory.units()[1].master));
  }
  check_same_states(on_disk, in_memory);
  on_disk.spill();
  CHECK_FALSE(on_disk.units()[1].exp_avg.defined());

  // Checkpoint files stream unit by unit from and to the store, and equal the in-memory ones.
  const std::string from_disk = (dir.path() / "disk.safetensors").string();
  const std::string from_memory = (dir.path() / "memory.safetensors").string();
  on_disk.save_state_file(from_disk);
  in_memory.save_state_file(from_memory);
  auto file_a = accel::engine::load_safetensors(from_disk), file_b = accel::engine::load_safetensors(from_memory);
  REQUIRE(file_a.size() == file_b.size());
  for (size_t i = 0; i < file_a.size(); ++i) {
    CHECK(file_a[i].first == file_b[i].first);
    CHECK(at::equal(file_a[i].second, file_b[i].second));
  }
  ShardedOptimizer resumed(section, 1);
  resumed.offload_to_nvme(dir.path().string(), 3);  // before the units: they go straight to files
  resumed.add_unit("a", FlatLayout({6, 10}, 2), {0, 1}, at::zeros({8}));
  resumed.add_unit("b", FlatLayout({7}, 2), {0}, at::zeros({4}));
  CHECK_FALSE(resumed.units()[0].master.defined());
  resumed.load_state_file(from_memory);
  resumed.materialize();
  auto c = resumed.state_tensors();
  REQUIRE(c.size() == file_b.size());
  for (size_t i = 0; i < c.size(); ++i) CHECK(at::equal(c[i].second, file_b[i].second));
  CHECK_THROWS_WITH(ShardedOptimizer(section, 0).load_state_file(from_memory + ".missing"),
                    Catch::Contains("memory.safetensors.missing"));
}

ACCEL_ASSERT_CHECK_IS_CATCH();
