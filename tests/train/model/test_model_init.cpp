// Seeded spec initialisation of the built-in models (BuiltinModule::initialize): the statistics of
// each parameter kind, determinism (same seed -> bit-identical, different seed -> different), no
// use of the global torch RNG, and bf16 as the rounded fp32 init. (Bit-exact reproduction by an
// independent Python implementation of the documented RNG order: tests/api/test_builtin_modules.cpp.)
#include "tests/support/catch_with_torch.hpp"

#include <cmath>

#include "tests/train/model/model_test_support.hpp"
#include "trainer/models/spec_init.hpp"

using accel::test::gpt_section;
using accel::test::mlp_section;
using accel::test::parameter;
using accel::train::make_builtin_module;

namespace {

// The sample std of n draws has relative standard error ~ 1/sqrt(2n): 0.28% for n = 65,536,
// 0.55% for 16,384 and 0.8% for 8,192. The tolerances below are more than 5 of those.
void check_normal(const at::Tensor& p, double expected_std, double rel_tol) {
  at::Tensor f = p.to(at::kDouble);
  const double n = static_cast<double>(f.numel());
  const double std = f.std().item<double>();
  CHECK(std::abs(std / expected_std - 1.0) < rel_tol);
  CHECK(std::abs(f.mean().item<double>()) < 5.0 * expected_std / std::sqrt(n));
}

bool all_equal_to(const at::Tensor& p, double value) { return (p.to(at::kDouble) == value).all().item<bool>(); }

bool identical(const accel::train::BuiltinModule& a, const accel::train::BuiltinModule& b) {
  auto pa = a.spec_parameters(), pb = b.spec_parameters();
  for (size_t i = 0; i < pa.size(); ++i)
    if (!at::equal(pa[i].second, pb[i].second)) return false;
  return true;
}

}  // namespace

TEST_CASE("gpt init follows the spec: N(0,0.02), c_proj N(0,0.02/sqrt(2L)), biases 0, LayerNorm 1/0", "[model][init]") {
  auto model = make_builtin_module(gpt_section(/*n_layer=*/2, /*n_head=*/4, /*n_embd=*/128, /*vocab=*/512, /*block=*/64));
  model->initialize(1337);
  const double residual_std = 0.02 / std::sqrt(2.0 * 2);
  check_normal(parameter(*model, "wte.weight"), 0.02, 0.02);            // 65,536 draws
  check_normal(parameter(*model, "wpe.weight"), 0.02, 0.05);            // 8,192
  check_normal(parameter(*model, "h.1.attn.c_attn.weight"), 0.02, 0.02);  // 49,152
  check_normal(parameter(*model, "h.0.mlp.c_fc.weight"), 0.02, 0.02);     // 65,536
  check_normal(parameter(*model, "h.0.mlp.c_proj.weight"), residual_std, 0.02);
  check_normal(parameter(*model, "h.1.attn.c_proj.weight"), residual_std, 0.03);  // 16,384
  for (auto& [name, p] : model->spec_parameters()) {
    INFO(name);
    const auto rule = accel::train::spec_init_rule(name, 2);
    if (rule.kind == accel::train::InitRule::Kind::zeros) CHECK(all_equal_to(p, 0.0));
    if (rule.kind == accel::train::InitRule::Kind::ones) CHECK(all_equal_to(p, 1.0));
  }
  CHECK(all_equal_to(parameter(*model, "h.0.ln_1.weight"), 1.0));
  CHECK(all_equal_to(parameter(*model, "ln_f.bias"), 0.0));
  CHECK(all_equal_to(parameter(*model, "h.1.mlp.c_proj.bias"), 0.0));
}

TEST_CASE("init rules by name", "[model][init]") {
  using Kind = accel::train::InitRule::Kind;
  auto rule = [](const std::string& name) { return accel::train::spec_init_rule(name, 8); };
  CHECK(rule("h.3.attn.c_proj.weight").std == Approx(0.005));
  CHECK(rule("h.3.mlp.c_proj.weight").std == Approx(0.005));
  CHECK(rule("h.3.attn.c_attn.weight").std == Approx(0.02));
  CHECK(rule("wpe.weight").kind == Kind::normal);
  CHECK(rule("layer.2.weight").kind == Kind::normal);
  CHECK(rule("h.0.ln_2.weight").kind == Kind::ones);
  CHECK(rule("h.0.ln_2.bias").kind == Kind::zeros);
  CHECK_THROWS_AS(rule("h.0.attn.mask"), std::invalid_argument);
}

TEST_CASE("the same seed gives identical weights, another seed different ones", "[model][init]") {
  auto a = make_builtin_module(gpt_section());
  auto b = make_builtin_module(gpt_section());
  a->initialize(42);
  b->initialize(42);
  CHECK(identical(*a, *b));
  a->initialize(42);  // re-initialising restarts the generator
  CHECK(identical(*a, *b));
  b->initialize(43);
  CHECK_FALSE(at::equal(parameter(*a, "wte.weight"), parameter(*b, "wte.weight")));
  CHECK_FALSE(at::equal(parameter(*a, "h.1.mlp.c_proj.weight"), parameter(*b, "h.1.mlp.c_proj.weight")));
}

TEST_CASE("initialize leaves the global torch RNG alone", "[model][init]") {
  at::manual_seed(7);
  at::Tensor expected = at::randn({8});
  at::manual_seed(7);
  make_builtin_module(gpt_section())->initialize(1);
  CHECK(at::equal(at::randn({8}), expected));
}

TEST_CASE("a bf16 model's init is the fp32 init rounded to bf16", "[model][init]") {
  auto fp32 = make_builtin_module(gpt_section());
  auto section = gpt_section();
  section.dtype = accel::config::ParamDtype::bf16;
  auto bf16 = make_builtin_module(section);
  fp32->initialize(5);
  bf16->initialize(5);
  auto p32 = fp32->spec_parameters(), p16 = bf16->spec_parameters();
  for (size_t i = 0; i < p32.size(); ++i) {
    INFO(p32[i].first);
    CHECK(at::equal(p32[i].second.to(at::kBFloat16), p16[i].second));
  }
}

TEST_CASE("mlp init: weights N(0, 0.02), biases 0", "[model][init][mlp]") {
  auto model = make_builtin_module(mlp_section(/*n_layer=*/2, /*n_embd=*/256, /*vocab=*/256));
  model->initialize(3);
  check_normal(parameter(*model, "wte.weight"), 0.02, 0.02);
  check_normal(parameter(*model, "layer.1.weight"), 0.02, 0.02);
  CHECK(all_equal_to(parameter(*model, "layer.0.bias"), 0.0));
}

ACCEL_ASSERT_CHECK_IS_CATCH();
