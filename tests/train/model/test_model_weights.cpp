// A model's weights file: save then load restores every parameter exactly, dtype conversion on
// load, and errors naming the parameter and the file for missing, mis-shaped, non-floating and
// extra tensors (the model is left unchanged by a rejected file).
#include "tests/support/catch_with_torch.hpp"

#include "engine/format/safetensors.hpp"
#include "runtime/common/errors.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/train/model/model_test_support.hpp"
#include "trainer/models/model_weights.hpp"

using accel::test::gpt_section;
using accel::test::parameter;
using accel::train::load_weights_into;
using accel::train::make_builtin_module;
using accel::engine::NamedTensors;

namespace {
// The weights of `model`, with `edit` applied, saved to a file in `dir`.
template <class Edit>
std::string edited_weights(accel::test::TempDir& dir, const accel::train::BuiltinModule& model, Edit edit) {
  NamedTensors tensors = model.spec_parameters();
  edit(tensors);
  const auto path = (dir.path() / "edited.safetensors").string();
  accel::engine::save_safetensors(path, tensors);
  return path;
}
}  // namespace

TEST_CASE("saved weights load back exactly into a fresh model", "[model][weights]") {
  accel::test::TempDir dir;
  auto source = make_builtin_module(gpt_section());
  source->initialize(99);
  const auto path = (dir.path() / "weights.safetensors").string();
  accel::engine::save_safetensors(path, source->spec_parameters());
  auto target = make_builtin_module(gpt_section());
  load_weights_into(target->spec_parameters(), path);
  auto a = source->spec_parameters(), b = target->spec_parameters();
  for (size_t i = 0; i < a.size(); ++i) {
    INFO(a[i].first);
    CHECK(at::equal(a[i].second, b[i].second));
  }
  // The file lists the parameters in spec order.
  auto file = accel::engine::load_safetensors(path);
  for (size_t i = 0; i < a.size(); ++i) CHECK(file[i].first == a[i].first);
}

TEST_CASE("loading converts the file's dtype to the model's", "[model][weights]") {
  accel::test::TempDir dir;
  auto source = make_builtin_module(gpt_section());
  source->initialize(5);
  const auto path = (dir.path() / "fp32.safetensors").string();
  accel::engine::save_safetensors(path, source->spec_parameters());
  auto section = gpt_section();
  section.dtype = accel::config::ParamDtype::bf16;
  auto target = make_builtin_module(section);
  load_weights_into(target->spec_parameters(), path);
  CHECK(at::equal(parameter(*target, "h.0.attn.c_attn.weight"),
                  parameter(*source, "h.0.attn.c_attn.weight").to(at::kBFloat16)));
}

TEST_CASE("load_weights_into names the parameter and the file for each mismatch", "[model][weights]") {
  accel::test::TempDir dir;
  auto source = make_builtin_module(gpt_section());
  source->initialize(1);
  auto target = make_builtin_module(gpt_section());

  SECTION("a missing parameter") {
    auto path = edited_weights(dir, *source, [](NamedTensors& t) { t.pop_back(); });
    CHECK_THROWS_WITH(load_weights_into(target->spec_parameters(), path),
                      Catch::Contains("'ln_f.bias' is missing") && Catch::Contains("'" + path + "'"));
  }
  SECTION("a mis-shaped parameter") {
    auto path = edited_weights(dir, *source, [](NamedTensors& t) {
      for (auto& [name, p] : t)
        if (name == "h.1.attn.c_attn.weight") p = p.t();
    });
    CHECK_THROWS_WITH(load_weights_into(target->spec_parameters(), path),
                      Catch::Contains("'h.1.attn.c_attn.weight' has shape [16, 48], the model needs [48, 16]") &&
                          Catch::Contains(path));
  }
  SECTION("an integer tensor where a weight belongs") {
    auto path = edited_weights(dir, *source, [](NamedTensors& t) { t[0].second = t[0].second.to(at::kLong); });
    CHECK_THROWS_WITH(load_weights_into(target->spec_parameters(), path), Catch::Contains("'wte.weight' has non-floating dtype I64"));
  }
  SECTION("a name the model does not have") {
    auto path = edited_weights(dir, *source, [](NamedTensors& t) { t.emplace_back("lm_head.weight", at::ones({2})); });
    CHECK_THROWS_WITH(load_weights_into(target->spec_parameters(), path), Catch::Contains("'lm_head.weight'") && Catch::Contains(path));
  }
  // A rejected file changes nothing.
  for (auto& [name, p] : target->spec_parameters()) CHECK(p.abs().sum().item<double>() == 0.0);
}

ACCEL_ASSERT_CHECK_IS_CATCH();
