// NVMe parameter offload (DeepSpeed offload_param_device: nvme, ZeRO-3) on in-process worlds:
//  - the parameter store stages shards from files (any dtype) or from the optimizer's master file,
//    and never holds more than buffer_count staged shards;
//  - the engine with parameter files trains exactly like the engine without them (losses, an eval
//    loss and the final weights bit for bit: the gathers read the same values, only from a file),
//    at world 1 and 2, fp32 and bf16, with and without optimizer nvme offload, with a staging pool
//    smaller than the prefetch; the files exist with one shard each and no compute shard is resident;
//  - checkpoints move between runs with and without parameter files, at the same world size and
//    resharded to another one.
//  - YaFSDP's layer buffers (the GPU default, off on the CPU) train bit for bit like the unit
//    allocator, with every slot allocated in the first step and their number bounded by the live limit.
// Through the launcher, against the unsharded reference: tests/numerics/test_trainer_end_to_end.py.
#include "tests/support/catch_with_torch.hpp"

#include <ATen/core/grad_mode.h>

#include <filesystem>
#include <limits>
#include <map>
#include <mutex>
#include <thread>

#include "engine/sharded/flat_layout.hpp"
#include "engine/sharded/nvme_param_store.hpp"
#include "engine/sharded/sharded_engine.hpp"
#include "engine/sharded/unit_grouping.hpp"
#include "runtime/comm/fake_communicator.hpp"
#include "tests/comm/comm_test_support.hpp"
#include "tests/engine/tiny_job.hpp"
#include "tests/support/prepared_builtin.hpp"
#include "tests/support/temp_dir.hpp"

namespace fs = std::filesystem;
using namespace accel::engine;
using accel::comm::Communicator;

TEST_CASE("nvme param store: shards in files of their dtype, or read from the master file, through a bounded pool",
          "[offload][param_offload]") {
  accel::test::TempDir dir;
  NvmeStateStore states(dir.path().string(), 0, 2);
  states.add_unit("m", 3 * 5);  // master (5 values) + two moments
  states.write(0, at::arange(15, at::kFloat));
  std::string scratch;
  {
    NvmeParamStore bf16(dir.path().string(), 0, 2, at::kBFloat16);
    scratch = bf16.directory();
    CHECK(scratch != states.directory());  // the two stores may share a directory
    const at::Tensor a = at::linspace(-1, 1, 7), b = at::linspace(3, 4, 5);
    CHECK(bf16.add_unit("a", a) == 0);
    CHECK(bf16.add_unit("b", b) == 1);
    CHECK(fs::file_size(bf16.file_path(0)) == 7 * 2);
    CHECK(fs::file_size(bf16.file_path(1)) == 5 * 2);
    CHECK(bf16.bytes_on_disk() == 12 * 2);
    CHECK(bf16.buffer_bytes() == 2 * 7 * 2);
    CHECK(at::equal(bf16.read(0), a.to(at::kBFloat16)));  // rounded once, like a compute-shard copy
    at::Tensor s0 = bf16.stage(0), s1 = bf16.stage(1);
    CHECK(at::equal(s1, b.to(at::kBFloat16)));
    CHECK(bf16.staged() == 2);
    CHECK_THROWS_WITH(bf16.stage(0), Catch::Contains("staged already"));
    bf16.unstage(0);
    bf16.write(0, a + 1);  // the write-back after a step
    CHECK(at::equal(bf16.stage(0), (a + 1).to(at::kBFloat16)));
    CHECK(bf16.peak_staged() == 2);
    CHECK_THROWS_WITH(bf16.write(1, at::ones({4})), Catch::Contains("holds 5 values"));

    NvmeParamStore fp32(dir.path().string(), 1, 1, at::kFloat);
    CHECK(fp32.add_master_view(states, 0, 5) == 0);
    CHECK_FALSE(fp32.has_own_file(0));
    CHECK(fp32.bytes_on_disk() == 0);  // the optimizer's file
    CHECK(fp32.add_master_view(states, 0, 5) == 1);
    CHECK(at::equal(fp32.stage(0), at::arange(5, at::kFloat)));
    CHECK_THROWS_WITH(fp32.stage(1), Catch::Contains("all 1 staging buffers are in use"));
    fp32.unstage(0);
    CHECK(at::equal(fp32.stage(1), at::arange(5, at::kFloat)));
    CHECK_THROWS_WITH(fp32.write(1, at::ones({5})), Catch::Contains("not written here"));
  }
  CHECK_FALSE(fs::exists(scratch));  // scratch files go with the store
  NvmeParamStore bf16(dir.path().string(), 2, 1, at::kBFloat16);
  CHECK_THROWS_WITH(bf16.add_master_view(states, 0, 5), Catch::Contains("needs fp32 compute"));
}

namespace {

using accel::test::PreparedBuiltin;
using accel::test::tiny_job;

at::Tensor offload_tokens(int rows, int offset) {
  return (at::arange(rows * 8, at::TensorOptions(at::kLong)) * 5 + offset).remainder(32).view({rows, 8});
}

struct Setup {
  int world = 2;
  bool bf16 = false;
  bool optimizer_nvme = false;
  bool param_nvme = false;
  bool param_host = false;  // offload_param_device: cpu (host_param_store.hpp)
  int buffer_count = 5;
  int64_t persistence_threshold = 0;
  bool layer_buffers = false;  // YaFSDP's fixed slots (layer_buffer_pool.hpp); the CPU default is off
  int max_live_units = 0;      // 0: no live limit
  bool stage2 = false;         // zero-2 instead of zero-3 (gradients sharded, parameters kept)
  int n_layer = 0;             // 0: tiny_job's
  UnitGroups unit_groups;      // engine units of several model units (empty: one per model unit)
};

// What one run observed. Losses are every rank's, per step; files and reports rank 0's.
struct OffloadObserved {
  std::vector<std::vector<double>> losses;
  std::vector<double> eval_loss;
  std::vector<at::Tensor> full;                 // full_parameters() on rank 0
  std::map<std::string, uintmax_t> param_files;  // rank 0's parameter files while the engine lives: name -> bytes
  // Rank 0's expected parameter file sizes, per engine unit but the root (pinned: it keeps its
  // parameters gathered, so it has no file), and the root's shard in the compute dtype.
  std::vector<int64_t> shard_bytes;
  int64_t root_shard_bytes = 0;
  nlohmann::json report;                         // rank 0's memory_report()
  nlohmann::json first_report;                   // rank 0's memory_report() after the first step
  std::string described;
  bool scratch_removed = false;
};

// The engine's policy under `s`: stage 3 with DeepSpeed's prefetch (every later unit ahead, so a
// small staging pool is the bound), files under `dir`.
ShardingPolicy policy_for(const Setup& s, const fs::path& dir) {
  ShardingPolicy policy;
  policy.label = "test";
  policy.shard_params = !s.stage2;
  policy.shard_grads = true;
  policy.compute_dtype = s.bf16 ? at::kBFloat16 : at::kFloat;
  policy.persistence_threshold = s.persistence_threshold;
  policy.prefetch.forward = true;
  policy.prefetch.backward = PrefetchPolicy::Backward::pre;
  policy.prefetch.max_prefetch_units = std::numeric_limits<int>::max();
  policy.nvme_buffer_count = s.buffer_count;
  if (s.optimizer_nvme) policy.nvme_dir = (dir / "optimizer").string();
  if (s.param_nvme) policy.param_nvme_dir = (dir / "params").string();
  policy.param_host_offload = s.param_host;
  policy.layer_buffers = s.layer_buffers;
  policy.prefetch.max_live_units = s.max_live_units;
  policy.offloads = s.param_host || s.param_nvme || s.optimizer_nvme;
  policy.unit_groups = s.unit_groups;
  return policy;
}

std::map<std::string, uintmax_t> files_under(const fs::path& dir, int rank) {
  std::map<std::string, uintmax_t> out;
  if (!fs::exists(dir)) return out;
  const std::string prefix = "accel_params_rank" + std::to_string(rank) + "_";
  for (const auto& sub : fs::directory_iterator(dir))
    if (sub.path().filename().string().rfind(prefix, 0) == 0)
      for (const auto& f : fs::directory_iterator(sub.path())) out[f.path().filename().string()] = f.file_size();
  return out;
}

// One training step on every rank's own rows (step k reads rows offset by k).
double train_step(PreparedBuiltin& model, int rank, int step) {
  auto& engine = model.engine();
  auto* hooks = engine.begin_micro_step(0, true);
  at::Tensor loss = model.loss(model.forward(offload_tokens(2, rank + step), hooks), offload_tokens(2, rank + step + 1));
  loss.backward();
  engine.end_micro_step(true);
  engine.clip_grad_norm(1.0);
  engine.optimizer_step(1e-2);
  return loss.item<double>();
}

double eval_loss(PreparedBuiltin& model) {
  at::NoGradGuard no_grad;
  return model.loss(model.forward(offload_tokens(2, 7), model.engine().eval_hooks()), offload_tokens(2, 8)).item<double>();
}

// `steps` steps from the model's seed-9 start, or from `resume` (a checkpoint and its layout),
// then optionally a checkpoint into `save`.
OffloadObserved run_offloaded(const Setup& s, int steps, int first_step = 0, const fs::path& resume = {}, const nlohmann::json& layout = {},
             const fs::path& save = {}, nlohmann::json* saved_layout = nullptr) {
  auto job = tiny_job();
  if (s.n_layer > 0) job.model.n_layer = s.n_layer;
  accel::test::TempDir dir;
  accel::comm::FakeWorld world(s.world);
  OffloadObserved o;
  o.losses.resize(size_t(s.world));
  o.eval_loss.resize(size_t(s.world));
  std::mutex mu;
  auto errors = accel::test::run_ranks(
      s.world, [&](int r) { return world.communicator(r); },
      [&](Communicator& comm) {
        const int r = comm.rank();
        std::vector<int64_t> shard_bytes;
        int64_t root_shard_bytes = 0;
        auto engine_over = [&](std::vector<UnitSpec> specs) {
          // Each engine unit's parameter numels in flat order, its shard in the compute dtype.
          const UnitGroups groups = s.unit_groups.empty() ? one_group_per_unit(int(specs.size())) : s.unit_groups;
          for (const auto& group : groups) {
            std::vector<int64_t> numels;
            bool pinned = false;
            for (int m : group) {
              pinned = pinned || specs[size_t(m)].pinned;
              for (const auto& [name, p] : specs[size_t(m)].params) numels.push_back(p.numel());
            }
            const int64_t bytes = FlatLayout(numels, s.world).shard_numel() * (s.bf16 ? 2 : 4);
            if (pinned) root_shard_bytes = bytes;
            else shard_bytes.push_back(bytes);
          }
          return std::make_unique<ShardedEngine>(comm, std::move(specs), accel::engine::builtin_optimizer_setup(job.optimizer),
                                                 policy_for(s, dir.path()));
        };
        {
          PreparedBuiltin model(job, accel::test::builtin_module(job.model, 9), engine_over);
          auto& engine = model.engine();
          if (!resume.empty()) engine.load_state(resume.string(), layout);
          auto files = files_under(dir.path() / "params", r);
          nlohmann::json first_report;
          for (int k = 0; k < steps; ++k) {
            o.losses[size_t(r)].push_back(train_step(model, r, first_step + k));
            if (k == 0) first_report = engine.memory_report();
          }
          o.eval_loss[size_t(r)] = eval_loss(model);
          auto full = engine.full_parameters();
          nlohmann::json saved;
          if (!save.empty()) {
            accel::engine::DirectFileSink files(save.string());
            saved = engine.save_state(files, {});
          }
          std::lock_guard<std::mutex> lock(mu);
          if (r == 0) {
            for (auto& [n, t] : full) o.full.push_back(t);
            o.param_files = files;
            o.shard_bytes = shard_bytes;
            o.root_shard_bytes = root_shard_bytes;
            o.report = engine.memory_report();
            o.first_report = first_report;
            o.described = engine.describe();
            if (saved_layout) *saved_layout = saved;
          }
        }
        if (r == 0) o.scratch_removed = files_under(dir.path() / "params", 0).empty();
      });
  CHECK(errors == std::vector<std::string>(size_t(s.world), ""));
  return o;
}

void check_same_training(const OffloadObserved& got, const OffloadObserved& want) {
  REQUIRE(got.losses.size() == want.losses.size());
  for (size_t r = 0; r < want.losses.size(); ++r) {
    CAPTURE(r);
    CHECK(got.losses[r] == want.losses[r]);  // bitwise: the same values gathered, from a file
    CHECK(got.eval_loss[r] == want.eval_loss[r]);
  }
  REQUIRE(got.full.size() == want.full.size());
  REQUIRE_FALSE(want.full.empty());
  for (size_t i = 0; i < want.full.size(); ++i) {
    CAPTURE(i);
    CHECK(at::equal(got.full[i], want.full[i]));
  }
}

}  // namespace

TEST_CASE("zero-3 with parameter files trains bit for bit like zero-3 without them", "[offload][param_offload]") {
  for (int world : {1, 2})
    for (bool bf16 : {false, true})
      for (bool optimizer_nvme : {false, true}) {
        CAPTURE(world, bf16, optimizer_nvme);
        Setup s;
        s.world = world;
        s.bf16 = bf16;
        s.optimizer_nvme = optimizer_nvme;
        // A pool of 2 while the prefetch wants every later unit: staging bounds the gathers in flight.
        s.buffer_count = 2;
        OffloadObserved without = run_offloaded(s, 3);
        s.param_nvme = true;
        OffloadObserved with = run_offloaded(s, 3);
        check_same_training(with, without);
        // Losses move: the gathers after each step read what the write-back put in the files.
        CHECK(with.losses[0][2] != with.losses[0][0]);

        // No compute shard of a partitioned unit in memory; with bf16 (or fp32 beside nvme masters)
        // there was one before, each partitioned unit's. The root (gathered through the step, no
        // file) has none beside its gathered buffer: its shard is its slice of it.
        int64_t partitioned = 0;
        for (int64_t b : with.shard_bytes) partitioned += b;
        CHECK(with.report.at("param_shards") == 0);
        CHECK(without.report.at("param_shards") == ((bf16 || optimizer_nvme) ? partitioned : 0));
        CHECK(with.report.at("param_nvme_staged_peak").get<int>() >= 1);
        CHECK(with.report.at("param_nvme_staged_peak").get<int>() <= 2);
        CHECK_THAT(with.described, Catch::Contains("parameter shards of " + std::to_string(with.shard_bytes.size()) + " units"));

        // One file per partitioned unit (all but the root) holding the rank's shard, except fp32
        // beside nvme masters: the gathers read the master's part of the optimizer's file (no
        // second copy).
        const bool from_masters = !bf16 && optimizer_nvme;
        int64_t total = 0;
        if (from_masters) {
          CHECK(with.param_files.empty());
          CHECK_THAT(with.described, Catch::Contains("read from the masters' files"));
        } else {
          REQUIRE(with.param_files.size() == with.shard_bytes.size());
          size_t u = 0;
          for (const auto& [name, bytes] : with.param_files) {  // "<index>_<unit>.<dtype>", index order
            CAPTURE(name);
            CHECK_THAT(name, Catch::EndsWith(bf16 ? ".bf16" : ".fp32"));
            CHECK(int64_t(bytes) == with.shard_bytes[u++]);
            total += int64_t(bytes);
          }
        }
        CHECK(with.report.at("param_nvme_bytes") == total);
        const int64_t opt_files = without.report.value("nvme_bytes", int64_t(0));
        CHECK(with.report.at("nvme_bytes") == opt_files + total);
        CHECK(with.report.at("nvme_buffer_bytes").get<int64_t>() ==
              without.report.value("nvme_buffer_bytes", int64_t(0)) + with.report.at("param_nvme_buffer_bytes").get<int64_t>());
        CHECK(with.scratch_removed);
      }
}

TEST_CASE("zero-3 with parameter shards in host memory trains bit for bit like zero-3 without them",
          "[offload][param_offload]") {
  // On the CPU the host shard is where the gather reads it (a GPU copies it to the device first:
  // tests/gpu/test_cuda_engine.py); what is checked here is the store's part: every partitioned
  // unit's shard held by it, written back after each step, and no compute shard beside it.
  for (int world : {1, 2})
    for (bool bf16 : {false, true}) {
      CAPTURE(world, bf16);
      Setup s;
      s.world = world;
      s.bf16 = bf16;
      OffloadObserved without = run_offloaded(s, 3);
      s.param_host = true;
      OffloadObserved with = run_offloaded(s, 3);
      check_same_training(with, without);
      CHECK(with.losses[0][2] != with.losses[0][0]);  // the write-back reached the gathers
      // No compute shard beside the store: the partitioned units' are in it, the root's is its slice
      // of its gathered buffer (bf16 without the store: the partitioned units' copies).
      int64_t shards = 0;
      for (int64_t b : with.shard_bytes) shards += b;
      CHECK(with.report.at("param_shards") == 0);
      CHECK(without.report.at("param_shards") == (bf16 ? shards : 0));
      CHECK(with.report.at("param_host_bytes") == shards);
      CHECK(with.param_files.empty());
      CHECK_THAT(with.described, Catch::Contains("offload to cpu: a no-op on a CPU run"));
    }
}

TEST_CASE("layer buffers: zero-2 and 3 train bit for bit with their transient buffers in fixed slots",
          "[layer_buffers]") {
  // The same schedule with the transient buffers' memory from the pool's slots instead of the unit
  // allocator: the values cannot change, the slots are all allocated in the first step (the pool
  // is frozen after it), and the live limit bounds how many there are. Eight layers: eight units
  // take slots (the layers; the root is the token unit, gathered through the step).
  SECTION("zero-3, world 1 and 2, fp32 and bf16") {
    for (int world : {1, 2})
      for (bool bf16 : {false, true}) {
        CAPTURE(world, bf16);
        Setup s;
        s.world = world;
        s.bf16 = bf16;
        s.n_layer = 8;
        s.max_live_units = 2;
        OffloadObserved without = run_offloaded(s, 3);
        s.layer_buffers = true;
        OffloadObserved with = run_offloaded(s, 3);
        check_same_training(with, without);
        CHECK_FALSE(without.report.contains("layer_buffer_slots"));
        const int slots = with.report.at("layer_buffer_slots");
        INFO("slots " << slots << ", fallbacks " << with.report.at("layer_buffer_fallbacks").get<int64_t>());
        CHECK(slots == with.first_report.at("layer_buffer_slots").get<int>());  // none added after step 1
        // Two gathered units under the live limit and the unit computing; a gradient buffer
        // accumulating and the previous one reducing; and up to two buffers whose release a
        // communication thread has not finished yet (timing).
        CHECK(slots >= 2);
        CHECK(slots <= s.max_live_units + 1 + 2 + 2);
        CHECK(with.report.at("layer_buffer_bytes").get<int64_t>() % slots == 0);
        CHECK_THAT(with.described, Catch::Contains("layer buffers: gathered parameters and gradient buffers"));
      }
  }
  SECTION("zero-3 without a live limit: every unit is gathered ahead at once, so it takes more slots") {
    Setup s;
    s.n_layer = 8;
    s.layer_buffers = true;
    OffloadObserved with = run_offloaded(s, 2);
    CHECK(with.report.at("layer_buffer_slots").get<int>() >= 8);  // the eight units, prefetched together
  }
  SECTION("zero-2: only the gradient buffers take slots") {
    Setup s;
    s.stage2 = true;
    OffloadObserved without = run_offloaded(s, 3);
    s.layer_buffers = true;
    OffloadObserved with = run_offloaded(s, 3);
    check_same_training(with, without);
    CHECK(with.report.at("layer_buffer_slots").get<int>() >= 1);
    CHECK(with.report.at("layer_buffer_slots") == with.first_report.at("layer_buffer_slots"));
  }
}

TEST_CASE("parameter files: a staging pool of one, and units under the persistence threshold stay in memory",
          "[offload][param_offload]") {
  Setup s;
  s.bf16 = true;
  s.buffer_count = 1;
  // Engine units of two layers and one of one (3,280 values per layer): under a threshold of 5,000
  // the one-layer unit stays gathered, the two pairs are partitioned into files.
  s.n_layer = 5;
  s.unit_groups = {{0}, {1, 2}, {3, 4}, {5}};
  s.persistence_threshold = 5000;
  OffloadObserved without = run_offloaded(s, 2);
  s.param_nvme = true;
  OffloadObserved with = run_offloaded(s, 2);
  check_same_training(with, without);
  CHECK(with.report.at("param_nvme_staged_peak") == 1);
  REQUIRE(with.shard_bytes.size() == 3);
  CHECK(with.param_files.size() + 1 == with.shard_bytes.size());
  // No compute shard in memory beside the gathered buffers: the persistent unit and the root gather
  // in place from their own slice (bf16 gathered buffers: the shard is in the compute dtype either way).
  CHECK(with.report.at("param_shards") == 0);
  CHECK(with.report.at("params").get<int64_t>() == (with.shard_bytes.back() + with.root_shard_bytes) * s.world);
}

TEST_CASE("checkpoints move between runs with and without parameter files, also resharded",
          "[offload][param_offload][reshard]") {
  Setup plain, files;
  files.param_nvme = true;
  files.optimizer_nvme = true;
  files.bf16 = plain.bf16 = true;
  plain.optimizer_nvme = true;
  // The uninterrupted reference: 4 steps without parameter files.
  OffloadObserved straight = run_offloaded(plain, 4);
  for (bool save_with_files : {true, false}) {
    CAPTURE(save_with_files);
    accel::test::TempDir ckpt;
    nlohmann::json layout;
    run_offloaded(save_with_files ? files : plain, 2, 0, {}, {}, ckpt.path(), &layout);
    REQUIRE(layout.value("layout", "") == "zero");
    OffloadObserved resumed = run_offloaded(save_with_files ? plain : files, 2, 2, ckpt.path(), layout);
    // Steps 3-4 resumed equal steps 3-4 uninterrupted, and so do the weights.
    for (size_t r = 0; r < 2; ++r)
      CHECK(resumed.losses[r] == std::vector<double>(straight.losses[r].begin() + 2, straight.losses[r].end()));
    OffloadObserved want = straight;  // its eval loss and weights; the losses were compared above
    want.losses = resumed.losses;
    check_same_training(resumed, want);
  }
  // Resharded: written at world 2 with parameter files, resumed at world 1 (the canonical form
  // fills the masters, and the parameter files are rewritten from them) with and without files.
  accel::test::TempDir ckpt;
  nlohmann::json layout;
  OffloadObserved saved = run_offloaded(files, 2, 0, {}, {}, ckpt.path(), &layout);
  Setup one = files, one_plain = plain;
  one.world = one_plain.world = 1;
  OffloadObserved at_one = run_offloaded(one, 2, 2, ckpt.path(), layout), at_one_plain = run_offloaded(one_plain, 2, 2, ckpt.path(), layout);
  check_same_training(at_one, at_one_plain);
  OffloadObserved loaded_only = run_offloaded(one, 0, 2, ckpt.path(), layout);  // no step: the checkpoint's weights
  REQUIRE(loaded_only.full.size() == saved.full.size());
  for (size_t i = 0; i < saved.full.size(); ++i) CHECK(at::equal(loaded_only.full[i], saved.full[i]));
  // The eval right after the resharded load gathers from the rewritten files: the checkpoint's loss.
  CHECK(loaded_only.eval_loss[0] == saved.eval_loss[0]);
}

namespace {

// The names of rank 0's gathered parameters (after a step and wait_parameters(): the kept units')
// whose values differ from their masters rounded to the compute dtype, and how many were compared
// (`gathered`); every rank calls it (the masters are gathered), rank 0's answer is the one.
std::vector<std::string> kept_parameters_off_masters(PreparedBuiltin& model, int& gathered) {
  auto& engine = model.engine();
  engine.wait_parameters();
  const auto full = engine.full_parameters();  // rank 0's; empty elsewhere
  std::vector<std::string> off;
  gathered = 0;
  for (const auto& [name, p] : model.parameters()) {
    if (p.storage().nbytes() == 0) continue;  // released: a partitioned unit
    for (const auto& [n, master] : full)
      if (n == name) {
        ++gathered;
        if (!at::equal(p, master.to(p.scalar_type()))) off.push_back(name);
      }
  }
  return off;
}

}  // namespace

TEST_CASE("a kept unit gathers in place from its slice: a load right after a step waits for that gather",
          "[offload][param_offload][reshard]") {
  // Stage 3's root stays gathered, and its compute shard is its own slice of the gathered buffer
  // (bf16, or fp32 beside nvme masters: no second copy). After a step its re-gather is in flight
  // until the next forward; a load_state then writes the loaded values into that slice, so it must
  // complete the gather first: else the gather, completing, writes the step's values back over the
  // loaded ones (a fake world's all-gather holds a copy of each rank's input from its issue), and
  // the next gather spreads them. Rank 1 issues its half of the step's gathers late (a sleep before
  // its optimizer step), so rank 0's is still in flight when it loads. After the first step and
  // after the load, the root's parameters equal its masters (the step and the load reach them
  // through the slice).
  for (bool nvme : {false, true}) {
    CAPTURE(nvme);
    Setup s;
    s.bf16 = !nvme;
    s.optimizer_nvme = s.param_nvme = nvme;
    accel::test::TempDir ckpt, dir;
    auto job = tiny_job();
    accel::comm::FakeWorld world(s.world);
    std::vector<double> after_load(size_t(s.world));
    int kept_compared = 0;
    std::vector<std::string> kept_off;
    nlohmann::json layout;
    std::mutex mu;
    auto errors = accel::test::run_ranks(
        s.world, [&](int r) { return world.communicator(r); },
        [&](Communicator& comm) {
          const int r = comm.rank();
          PreparedBuiltin model(job, accel::test::builtin_module(job.model, 9), [&](std::vector<UnitSpec> specs) {
            return std::make_unique<ShardedEngine>(comm, std::move(specs), accel::engine::builtin_optimizer_setup(job.optimizer),
                                                   policy_for(s, dir.path()));
          });
          auto& engine = model.engine();
          train_step(model, r, 0);
          // The step reached the root's gathered parameters through its shard (the slice).
          int gathered = 0;
          const auto off = kept_parameters_off_masters(model, gathered);
          if (r == 0) {
            std::lock_guard<std::mutex> lock(mu);
            kept_compared = gathered;
            kept_off = off;
          }
          accel::engine::DirectFileSink files(ckpt.path().string());
          const nlohmann::json saved = engine.save_state(files, {});
          auto* hooks = engine.begin_micro_step(0, true);
          model.loss(model.forward(offload_tokens(2, r + 1), hooks), offload_tokens(2, r + 2)).backward();
          engine.end_micro_step(true);
          engine.clip_grad_norm(1.0);
          if (r == 1) std::this_thread::sleep_for(std::chrono::milliseconds(300));
          engine.optimizer_step(1e-2);  // issues the root's re-gather
          engine.load_state(ckpt.path().string(), saved);
          int gathered_after_load = 0;
          const auto off_after_load = kept_parameters_off_masters(model, gathered_after_load);
          const double loss = eval_loss(model);
          std::lock_guard<std::mutex> lock(mu);
          after_load[size_t(r)] = loss;
          if (r == 0) {
            layout = saved;
            kept_off.insert(kept_off.end(), off_after_load.begin(), off_after_load.end());
            kept_compared += gathered_after_load;
          }
        });
    REQUIRE(errors == std::vector<std::string>(size_t(s.world), ""));
    CHECK(kept_compared == 2 * 4);  // wte, wpe and ln_f's weight and bias, after the step and the load
    CHECK(kept_off.empty());
    // The same checkpoint loaded by a fresh engine (no gather in flight): the same eval loss.
    OffloadObserved fresh = run_offloaded(s, 0, 1, ckpt.path(), layout);
    for (size_t r = 0; r < size_t(s.world); ++r) {
      CAPTURE(r);
      CHECK(after_load[r] == fresh.eval_loss[r]);
    }
  }
}

ACCEL_ASSERT_CHECK_IS_CATCH();
