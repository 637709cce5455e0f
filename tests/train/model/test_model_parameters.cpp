// The built-in models' parameters (GptModule, MlpModule): names, shapes and order exactly as
// spec/training.md lists them, the units the unit policy makes of them (every parameter in exactly
// one), counts, dtypes and factory errors.
#include "tests/support/catch_with_torch.hpp"

#include <set>

#include "api/unit_policy.hpp"
#include "runtime/common/errors.hpp"
#include "tests/train/model/model_test_support.hpp"

using accel::test::gpt_section;
using accel::test::mlp_section;
using accel::train::make_builtin_module;

namespace {

using Shape = std::vector<int64_t>;
using NamedShapes = std::vector<std::pair<std::string, Shape>>;

NamedShapes names_and_shapes(const accel::train::BuiltinModule& model) {
  NamedShapes out;
  for (const auto& [name, p] : model.spec_parameters()) out.emplace_back(name, p.sizes().vec());
  return out;
}

int64_t num_parameters(const accel::train::BuiltinModule& model) {
  int64_t n = 0;
  for (const auto& [name, p] : model.spec_parameters()) n += p.numel();
  return n;
}

// The spec's list, written out by hand for V, T, C and two blocks.
NamedShapes spec_gpt_list(int64_t V, int64_t T, int64_t C) {
  NamedShapes list = {{"wte.weight", {V, C}}, {"wpe.weight", {T, C}}};
  for (int i = 0; i < 2; ++i) {
    const std::string h = "h." + std::to_string(i) + ".";
    list.push_back({h + "ln_1.weight", {C}});
    list.push_back({h + "ln_1.bias", {C}});
    list.push_back({h + "attn.c_attn.weight", {3 * C, C}});
    list.push_back({h + "attn.c_attn.bias", {3 * C}});
    list.push_back({h + "attn.c_proj.weight", {C, C}});
    list.push_back({h + "attn.c_proj.bias", {C}});
    list.push_back({h + "ln_2.weight", {C}});
    list.push_back({h + "ln_2.bias", {C}});
    list.push_back({h + "mlp.c_fc.weight", {4 * C, C}});
    list.push_back({h + "mlp.c_fc.bias", {4 * C}});
    list.push_back({h + "mlp.c_proj.weight", {C, 4 * C}});
    list.push_back({h + "mlp.c_proj.bias", {C}});
  }
  list.push_back({"ln_f.weight", {C}});
  list.push_back({"ln_f.bias", {C}});
  return list;
}

int64_t gpt_count(int64_t V, int64_t T, int64_t C, int64_t L) { return V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C; }

}  // namespace

TEST_CASE("gpt parameter names, shapes and order match the spec list exactly", "[model][gpt]") {
  auto model = make_builtin_module(gpt_section(/*n_layer=*/2, /*n_head=*/2, /*n_embd=*/16, /*vocab=*/32, /*block=*/8));
  CHECK(names_and_shapes(*model) == spec_gpt_list(32, 8, 16));
}

TEST_CASE("gpt units are root, then the wrapped blocks h.0.., and partition the parameters", "[model][gpt]") {
  auto model = make_builtin_module(gpt_section(3));
  std::vector<std::string> unit_names;
  std::vector<std::string> concatenated;
  std::set<const void*> seen;
  const auto units = accel::api::apply_unit_policy(*model, {});
  for (const auto& unit : units) {
    unit_names.push_back(unit.name);
    // A block is an accel::Unit<> wrapper whose own parameters are the unit's; the root has none.
    if (unit.name == "root") CHECK(unit.boundary == nullptr);
    else REQUIRE((unit.boundary && unit.params.size() == unit.boundary->parameters().size()));
    for (auto& [name, p] : unit.params) {
      concatenated.push_back(name);
      CHECK(seen.insert(p.unsafeGetTensorImpl()).second);  // no tensor in two places
    }
  }
  CHECK(unit_names == std::vector<std::string>{"root", "h.0", "h.1", "h.2"});
  // The root's parameters (the tables and the final norm, read outside the blocks), then each
  // block's, each in spec order.
  std::vector<std::string> root_first = {"wte.weight", "wpe.weight", "ln_f.weight", "ln_f.bias"};
  for (auto& [name, p] : model->spec_parameters())
    if (name.rfind("h.", 0) == 0) root_first.push_back(name);
  CHECK(concatenated == root_first);
  CHECK(units[0].params.size() == 4);  // wte once (tied), wpe, ln_f
  CHECK(units[1].params.front().first == "h.0.ln_1.weight");
  CHECK(units[3].params.back().first == "h.2.mlp.c_proj.bias");
}

TEST_CASE("gpt parameter count matches 12LC^2 + 13LC + (V + T + 2)C", "[model][gpt]") {
  CHECK(num_parameters(*make_builtin_module(gpt_section(2, 2, 16, 32, 8))) == gpt_count(32, 8, 16, 2));
  CHECK(num_parameters(*make_builtin_module(gpt_section(4, 4, 128, 256, 128))) == gpt_count(256, 128, 128, 4));
  // GPT-2 small (124M): nanoGPT prints 123.65M, which excludes wpe's 786,432.
  CHECK(gpt_count(50257, 1024, 768, 12) == 124'439'808);
}

TEST_CASE("mlp parameters are wte then layer.{i}.weight/bias, one unit per layer", "[model][mlp]") {
  auto model = make_builtin_module(mlp_section(/*n_layer=*/3, /*n_embd=*/16, /*vocab=*/32));
  NamedShapes expected = {{"wte.weight", {32, 16}}};
  for (int i = 0; i < 3; ++i) {
    expected.push_back({"layer." + std::to_string(i) + ".weight", {16, 16}});
    expected.push_back({"layer." + std::to_string(i) + ".bias", {16}});
  }
  CHECK(names_and_shapes(*model) == expected);
  std::vector<std::string> unit_names;
  for (const auto& unit : accel::api::apply_unit_policy(*model, {})) unit_names.push_back(unit.name);
  CHECK(unit_names == std::vector<std::string>{"root", "layer.0", "layer.1", "layer.2"});
  CHECK(num_parameters(*model) == 32 * 16 + 3 * (16 * 16 + 16));
}

TEST_CASE("parameters are created in model.dtype and start at zero", "[model]") {
  auto section = gpt_section();
  section.dtype = accel::config::ParamDtype::bf16;
  auto model = make_builtin_module(section);
  for (auto& [name, p] : model->spec_parameters()) {
    INFO(name);
    CHECK(p.scalar_type() == at::kBFloat16);
    CHECK(p.requires_grad());
    CHECK(p.abs().sum().item<double>() == 0.0);
  }
}

TEST_CASE("make_builtin_module rejects a section it cannot build, naming the key", "[model]") {
  auto bad_heads = gpt_section(2, /*n_head=*/3, /*n_embd=*/16);
  REQUIRE_THROWS_AS(make_builtin_module(bad_heads), accel::ConfigError);
  try {
    make_builtin_module(bad_heads);
  } catch (const accel::ConfigError& e) {
    REQUIRE(e.diagnostics().size() == 1);
    CHECK(e.diagnostics()[0].key_path == "model.n_embd");
  }
  auto zero_layers = mlp_section(/*n_layer=*/0);
  CHECK_THROWS_AS(make_builtin_module(zero_layers), accel::ConfigError);
}

ACCEL_ASSERT_CHECK_IS_CATCH();
