// Resharding checkpoints (docs/design/0006): the reslicing arithmetic (a range of a unit's flat
// buffer located among the shards of any world size, padding never read), and the canonical form
// read from real checkpoint files of every layout into shards at another world size or into a
// replicated optimizer, with step counts carried and clear errors for what cannot be resumed.
// End-to-end resumes through the launcher: tests/numerics/test_resharding_end_to_end.py.
#include "tests/support/catch_with_torch.hpp"

#include <filesystem>
#include <map>

#include "engine/format/canonical_state.hpp"
#include "engine/format/checkpoint_reshard.hpp"
#include "engine/format/reslice.hpp"
#include "engine/format/safetensors.hpp"
#include "runtime/common/errors.hpp"
#include "tests/support/temp_dir.hpp"

using namespace accel::engine;
using accel::RunError;
using accel::engine::NamedTensors;

// ---- pure arithmetic ----------------------------------------------------------------------------

TEST_CASE("locate_flat_range: a range of the flat buffer as pieces of consecutive shards", "[reshard]") {
  FlatLayout layout({4, 3, 3}, 4);  // N 10, S 3, P 12
  auto pieces = locate_flat_range(layout, 2, 5);  // [2, 7): end of rank 0, all of rank 1, start of rank 2
  REQUIRE(pieces.size() == 3);
  CHECK((pieces[0].rank == 0 && pieces[0].shard_offset == 2 && pieces[0].dest_offset == 0 && pieces[0].numel == 1));
  CHECK((pieces[1].rank == 1 && pieces[1].shard_offset == 0 && pieces[1].dest_offset == 1 && pieces[1].numel == 3));
  CHECK((pieces[2].rank == 2 && pieces[2].shard_offset == 0 && pieces[2].dest_offset == 4 && pieces[2].numel == 1));
  CHECK(locate_flat_range(layout, 9, 1).size() == 1);  // the last real element, in rank 3
  CHECK(locate_flat_range(layout, 4, 0).empty());
  CHECK_THROWS_AS(locate_flat_range(layout, 9, 2), std::invalid_argument);  // element 10 is padding
  CHECK_THROWS_AS(locate_flat_range(layout, -1, 2), std::invalid_argument);
}

namespace {

// Rebuilds every rank's shard of `to` from the shards of `from` (values: flat index + 1, padding
// 0) the way restore_shards does (the new rank's segments, each located in the old layout) and
// checks each against the expected shard, padding included.
void check_reslice(const std::vector<int64_t>& numels, int from_world, int to_world) {
  FlatLayout from(numels, from_world), to(numels, to_world);
  auto value = [&](int64_t flat) { return flat < from.numel() ? float(flat + 1) : 0.0f; };
  std::vector<std::vector<float>> old_shards(size_t(from_world), std::vector<float>(size_t(from.shard_numel())));
  for (int r = 0; r < from_world; ++r)
    for (int64_t i = 0; i < from.shard_numel(); ++i) old_shards[size_t(r)][size_t(i)] = value(r * from.shard_numel() + i);
  for (int r = 0; r < to_world; ++r) {
    std::vector<float> shard(size_t(to.shard_numel()), -1.0f);  // -1: never written
    for (const auto& seg : to.segments(r))
      for (const auto& piece : locate_flat_range(from, from.param_offset(seg.param) + seg.param_offset, seg.numel)) {
        REQUIRE(piece.shard_offset + piece.numel <= from.shard_numel());
        REQUIRE(piece.rank * from.shard_numel() + piece.shard_offset + piece.numel <= from.numel());  // no padding read
        for (int64_t k = 0; k < piece.numel; ++k)
          shard[size_t(seg.shard_offset + piece.dest_offset + k)] = old_shards[size_t(piece.rank)][size_t(piece.shard_offset + k)];
      }
    for (int64_t i = 0; i < to.shard_numel(); ++i) {
      int64_t flat = r * to.shard_numel() + i;
      INFO("world " << from_world << " -> " << to_world << ", rank " << r << ", element " << i);
      CHECK(shard[size_t(i)] == (flat < to.numel() ? value(flat) : -1.0f));  // padding untouched
    }
  }
}

}  // namespace

TEST_CASE("reslicing rebuilds every new shard exactly, at any pair of world sizes, with padding", "[reshard]") {
  SECTION("2 -> 3: 10 values, no padding at 2, 2 padding values at 3") { check_reslice({4, 3, 3}, 2, 3); }
  SECTION("4 -> 1: 2 padding values at 4, none at 1") { check_reslice({4, 3, 3}, 4, 1); }
  SECTION("1 -> 4") { check_reslice({4, 3, 3}, 1, 4); }
  SECTION("3 -> 2, a parameter spanning three shards") { check_reslice({1, 9, 1}, 3, 2); }
  SECTION("3 -> 5 with padding on both sides") { check_reslice({7, 6}, 3, 5); }
  SECTION("fewer values than ranks: 2 -> 4, ranks 2 and 3 hold only padding") { check_reslice({1, 1}, 2, 4); }
  SECTION("same world: the identity") { check_reslice({5, 2}, 2, 2); }
}

// ---- the canonical form from checkpoint files ---------------------------------------------------

namespace {

// A tiny two-unit model: unit "a" (a.w [3, 2], a.b [3]) and unit "b" (b.w [2, 2]).
struct TinyModel {
  std::vector<std::string> units = {"a", "b"};
  std::vector<std::vector<ParamRecord>> params = {{{"a.w", {3, 2}, 6}, {"a.b", {3}, 3}}, {{"b.w", {2, 2}, 4}}};
};

// The value every kind holds at element i of parameter p (global position in the model + a kind base).
float expected(const std::string& kind, int64_t model_offset) {
  static const std::map<std::string, float> base = {
      {kParamKind, 0.0f}, {"exp_avg", 1000.0f}, {"exp_avg_sq", 2000.0f}, {"momentum", 3000.0f}};
  return base.at(kind) + float(model_offset + 1);
}

// The expected flat [P] buffer of `kind` for unit u at `world` (padding 0).
at::Tensor expected_flat(const TinyModel& m, size_t u, int world, const std::string& kind) {
  int64_t before = 0;
  for (size_t v = 0; v < u; ++v)
    for (const auto& p : m.params[v]) before += p.numel;
  std::vector<int64_t> numels;
  for (const auto& p : m.params[u]) numels.push_back(p.numel);
  FlatLayout layout(numels, world);
  at::Tensor flat = at::zeros({layout.padded_numel()}, at::kFloat);
  for (int64_t i = 0; i < layout.numel(); ++i) flat[i] = expected(kind, before + i);
  return flat;
}

FlatLayout layout_of(const TinyModel& m, size_t u, int world) {
  std::vector<int64_t> numels;
  for (const auto& p : m.params[u]) numels.push_back(p.numel);
  return FlatLayout(numels, world);
}

accel::config::OptimizerSection adamw() { return {}; }
accel::config::OptimizerSection sgd_momentum() {
  accel::config::OptimizerSection s;
  s.name = accel::config::OptimizerName::sgd;
  return s;
}

std::vector<std::string> kinds_of(const accel::config::OptimizerSection& s) {
  if (s.name == accel::config::OptimizerName::adamw) return {"exp_avg", "exp_avg_sq"};
  return {"momentum"};
}

// This rank's shards of every unit at `world`, filled with the expected values (or zeros).
ShardedOptimizer make_shards(const TinyModel& m, const accel::config::OptimizerSection& s, int world, int rank,
                             bool filled, int64_t step) {
  ShardedOptimizer opt(s, rank);
  for (size_t u = 0; u < m.units.size(); ++u) {
    FlatLayout layout = layout_of(m, u, world);
    auto slice = [&](const std::string& kind) {
      return expected_flat(m, u, world, kind).narrow(0, rank * layout.shard_numel(), layout.shard_numel());
    };
    std::vector<int> groups;
    for (const auto& p : m.params[u]) groups.push_back(accel::engine::builtin_param_group(int64_t(p.shape.size())));
    auto& st = opt.add_unit(m.units[u], layout, groups, filled ? slice(kParamKind) : at::zeros({layout.shard_numel()}));
    if (!filled) continue;
    for (const auto& kind : kinds_of(s)) {
      at::Tensor t = kind == "exp_avg" ? st.exp_avg : kind == "exp_avg_sq" ? st.exp_avg_sq : st.momentum;
      t.copy_(slice(kind));
    }
    st.step = step;
  }
  return opt;
}

nlohmann::json write_zero_checkpoint(const std::string& dir, const TinyModel& m, const accel::config::OptimizerSection& s,
                                     int world, int64_t step) {
  for (int r = 0; r < world; ++r)
    accel::engine::save_safetensors(dir + "/" + zero_shard_file(r), make_shards(m, s, world, r, true, step).state_tensors());
  std::vector<ZeroUnitRecord> records;
  for (size_t u = 0; u < m.units.size(); ++u) records.push_back({m.units[u], layout_of(m, u, world), m.params[u]});
  return zero_layout_json("test", world, records, kinds_of(s));
}

NamedTensors expected_params(const TinyModel& m, const std::string& kind) {
  NamedTensors out;
  int64_t offset = 0;
  for (const auto& unit : m.params)
    for (const auto& p : unit) {
      at::Tensor t = at::empty({p.numel}, at::kFloat);
      for (int64_t i = 0; i < p.numel; ++i) t[i] = expected(kind, offset + i);
      out.emplace_back(p.name, t.view(p.shape));
      offset += p.numel;
    }
  return out;
}

nlohmann::json write_replicated_checkpoint(const std::string& dir, const TinyModel& m, int64_t step) {
  NamedTensors params = expected_params(m, kParamKind);
  auto opt = accel::engine::Optimizer::make(adamw(), params);
  NamedTensors state = opt->state_tensors();
  for (auto& [key, t] : state) {
    if (key == "step_count" || key.rfind("step.", 0) == 0) {
      t = at::scalar_tensor(step, at::TensorOptions().dtype(at::kLong));
      continue;
    }
    std::string kind = key.substr(0, key.find('.')), name = key.substr(key.find('.') + 1);
    for (auto& [n, v] : expected_params(m, kind))
      if (n == name) t.copy_(v);
  }
  opt->load_state(state);
  accel::engine::save_safetensors(dir + "/model.safetensors", params);
  accel::engine::save_safetensors(dir + "/optimizer.safetensors", opt->state_tensors());
  return {{"layout", "replicated"}};
}

// Restores every rank of `world` from `source` and checks masters, moments, padding and steps.
void check_restored_shards(const CanonicalState& source, const TinyModel& m, int world, int64_t step) {
  for (int r = 0; r < world; ++r) {
    ShardedOptimizer opt = make_shards(m, adamw(), world, r, false, 0);
    opt.units()[0].master.fill_(-5.0f);  // stale values, padding included, must be overwritten
    restore_shards(source, opt.units(), m.params, "test");
    for (size_t u = 0; u < m.units.size(); ++u) {
      const UnitShardState& st = opt.units()[u];
      int64_t S = st.layout.shard_numel();
      INFO("world " << world << ", rank " << r << ", unit " << m.units[u]);
      CHECK(at::equal(st.master, expected_flat(m, u, world, kParamKind).narrow(0, r * S, S)));
      CHECK(at::equal(st.exp_avg, expected_flat(m, u, world, "exp_avg").narrow(0, r * S, S)));
      CHECK(at::equal(st.exp_avg_sq, expected_flat(m, u, world, "exp_avg_sq").narrow(0, r * S, S)));
      CHECK(st.step == step);
    }
  }
}

}  // namespace

TEST_CASE("zero shards written at world 2 resume at world 3 (padded) and 1, step counts carried", "[reshard]") {
  accel::test::TempDir dir;
  TinyModel m;
  auto layout = write_zero_checkpoint(dir.path().string(), m, adamw(), 2, 7);
  CHECK(layout["format"] == kZeroLayoutFormat);
  CHECK(layout["units"][0]["params"][1] == nlohmann::json({{"name", "a.b"}, {"shape", {3}}, {"offset", 6}, {"numel", 3}}));
  CHECK(layout["units"][0]["padded_numel"] == 10);
  CHECK(layout["units"][0]["shard_numel"] == 5);
  auto source = CanonicalState::open(dir.path().string(), layout);
  CHECK(source->describe() == "zero layout, 2 rank(s), 2 units");
  REQUIRE(source->params().size() == 3);
  CHECK(source->params()[2].name == "b.w");
  CHECK(source->state_kinds() == std::vector<std::string>{"exp_avg", "exp_avg_sq"});
  CHECK(source->step_count() == 7);
  for (const auto& kind : {std::string(kParamKind), std::string("exp_avg"), std::string("exp_avg_sq")})
    for (const auto& [name, want] : expected_params(m, kind)) {
      INFO(kind << " " << name);
      CHECK(at::equal(source->read_full(name, kind), want));
      CHECK(source->step(name) == 7);
    }
  // a range inside one parameter that straddles the two world-2 shards of unit a (S 5)
  CHECK(at::equal(source->read("a.w", "exp_avg", 3, 3), expected_params(m, "exp_avg")[0].second.reshape(-1).narrow(0, 3, 3)));
  CHECK_THROWS_WITH(source->read("a.w", "exp_avg", 4, 4), Catch::Contains("outside parameter 'a.w'"));
  CHECK_THROWS_WITH(source->read_full("a.w", "momentum"), Catch::Contains("holds no optimizer state 'momentum'"));
  check_restored_shards(*source, m, 3, 7);
  check_restored_shards(*source, m, 1, 7);
  check_restored_shards(*source, m, 2, 7);
}

TEST_CASE("resuming at another world size, a rank reads only the values of its own shards", "[reshard]") {
  // Sliced loading (docs/design/0023 decision 4): each rank restores its shards with reads of
  // exactly the real values they hold (padding is never read), in every kind, whatever the world
  // that wrote them; all ranks together read each value once. A rank reading whole files would read
  // every value of the checkpoint. (The step counts, 8 bytes per unit and writer, are read when the
  // checkpoint is opened, before the count starts.)
  accel::test::TempDir dir;
  TinyModel m;
  for (int written : {2, 3}) {
    auto layout = write_zero_checkpoint(dir.path().string(), m, adamw(), written, 7);
    auto source = CanonicalState::open(dir.path().string(), layout);
    const int64_t kinds = 3;  // the master and the two moments
    for (int world : {1, 2, 3, 4}) {
      if (world == written) continue;  // the same world reads its own file (ShardedEngine::load_state)
      uint64_t all_ranks = 0;
      for (int r = 0; r < world; ++r) {
        INFO("written at " << written << ", read at " << world << ", rank " << r);
        ShardedOptimizer opt = make_shards(m, adamw(), world, r, false, 0);
        int64_t own_values = 0;
        for (size_t u = 0; u < m.units.size(); ++u)
          for (const auto& seg : layout_of(m, u, world).segments(r)) own_values += seg.numel;
        const uint64_t before = accel::engine::SafetensorsReader::data_bytes_read_on_this_thread();
        restore_shards(*source, opt.units(), m.params, "test");
        const uint64_t read = accel::engine::SafetensorsReader::data_bytes_read_on_this_thread() - before;
        CHECK(read == uint64_t(own_values * kinds * 4));
        all_ranks += read;
      }
      CHECK(all_ranks == uint64_t((6 + 3 + 4) * kinds * 4));
    }
    std::filesystem::remove_all(dir.path());
    std::filesystem::create_directories(dir.path());
  }
}

TEST_CASE("a replicated checkpoint resumes as shards, and shards resume a replicated optimizer", "[reshard]") {
  TinyModel m;
  SECTION("replicated -> zero at world 2") {
    accel::test::TempDir dir;
    auto source = CanonicalState::open(dir.path().string(), write_replicated_checkpoint(dir.path().string(), m, 5));
    CHECK(source->state_kinds() == std::vector<std::string>{"exp_avg", "exp_avg_sq"});
    CHECK(source->step_count() == 5);
    check_restored_shards(*source, m, 2, 5);
  }
  SECTION("zero at world 3 -> replicated") {
    accel::test::TempDir dir;
    auto source = CanonicalState::open(dir.path().string(), write_zero_checkpoint(dir.path().string(), m, adamw(), 3, 9));
    NamedTensors params = expected_params(m, kParamKind);
    for (auto& [name, p] : params) p = at::zeros_like(p);
    auto opt = accel::engine::Optimizer::make(adamw(), params);
    restore_replicated(*source, params, *opt, "test");
    auto want = expected_params(m, kParamKind);
    for (size_t i = 0; i < params.size(); ++i) CHECK(at::equal(params[i].second, want[i].second));
    CHECK(opt->step_count() == 9);
    for (const auto& [key, t] : opt->state_tensors()) {
      INFO(key);
      if (key == "step_count" || key.rfind("step.", 0) == 0) {
        CHECK(t.item<int64_t>() == 9);
        continue;
      }
      std::string kind = key.substr(0, key.find('.')), name = key.substr(key.find('.') + 1);
      for (auto& [n, v] : expected_params(m, kind))
        if (n == name) CHECK(at::equal(t, v));
    }
  }
}

TEST_CASE("a zero record of format 1 (no parameter records) is read through model.safetensors", "[reshard]") {
  accel::test::TempDir dir;
  TinyModel m;
  write_zero_checkpoint(dir.path().string(), m, adamw(), 2, 4);
  accel::engine::save_safetensors(dir.path().string() + "/model.safetensors", expected_params(m, kParamKind));
  nlohmann::json legacy = {{"layout", "zero"}, {"world_size", 2}, {"policy", "deepspeed zero_stage 2"},
                           {"units", {{{"unit", "a"}, {"numel", 9}}, {{"unit", "b"}, {"numel", 4}}}}};
  auto source = CanonicalState::open(dir.path().string(), legacy);
  CHECK(source->state_kinds() == std::vector<std::string>{"exp_avg", "exp_avg_sq"});
  check_restored_shards(*source, m, 3, 4);
}

TEST_CASE("what cannot be resumed is a RunError naming the checkpoint and the difference", "[reshard]") {
  accel::test::TempDir dir;
  const std::string d = dir.path().string();
  TinyModel m;
  auto layout = write_zero_checkpoint(d, m, adamw(), 2, 3);
  auto source = CanonicalState::open(d, layout);
  SECTION("another optimizer") {
    ShardedOptimizer opt = make_shards(m, sgd_momentum(), 2, 0, false, 0);
    CHECK_THROWS_WITH(restore_shards(*source, opt.units(), m.params, "deepspeed zero_stage 1"),
                      Catch::Contains("holds optimizer state {exp_avg, exp_avg_sq} (adamw)") &&
                          Catch::Contains("keeps {momentum} (sgd with momentum)"));
  }
  SECTION("another model") {
    TinyModel other;
    other.params[1][0].shape = {4, 1};
    ShardedOptimizer opt = make_shards(other, adamw(), 2, 0, false, 0);
    CHECK_THROWS_WITH(restore_shards(*source, opt.units(), other.params, "test"),
                      Catch::Contains("written for another model") && Catch::Contains("b.w [2, 2] (this model: [4, 1])"));
  }
  SECTION("a shard file missing") {
    std::filesystem::remove(d + "/" + zero_shard_file(1));
    CHECK_THROWS_WITH(CanonicalState::open(d, layout), Catch::Contains("zero_rank_00001.safetensors is missing"));
  }
  SECTION("a record that disagrees with the files") {
    layout["units"][1]["shard_numel"] = 3;
    CHECK_THROWS_WITH(CanonicalState::open(d, layout), Catch::Contains("unit 'b' records shard_numel 3"));
  }
  SECTION("an unknown layout") {
    CHECK_THROWS_WITH(CanonicalState::open(d, {{"layout", "fsdp_sharded"}}),
                      Catch::Contains("backend layout \"fsdp_sharded\", which this accel cannot read"));
  }
}
