// Cross-checks of GptModule against gpt_reference.py, an independent implementation of the spec in
// Debian's Python torch: the forward and loss of a tiny gpt on random weights, and the seeded init
// reproduced bit for bit from the documented RNG order.
#include "tests/support/catch_with_torch.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/csrc/autograd/grad_mode.h>

#include "trainer/models/builtin_ops.hpp"
#include "engine/format/safetensors.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/train/model/model_test_support.hpp"

using accel::test::gpt_section;
using accel::test::run_python_script;
using accel::test::shell_quote;
using accel::train::make_builtin_module;
using accel::train::token_cross_entropy;

TEST_CASE("gpt forward and loss match an independent Python implementation", "[model][python]") {
  accel::test::TempDir dir;
  auto model = make_builtin_module(gpt_section(/*n_layer=*/2, /*n_head=*/2, /*n_embd=*/16, /*vocab=*/32, /*block=*/8));
  // Random values for every parameter (biases and LayerNorm too, which the init would leave
  // constant), large enough that attention is far from uniform: a wrong q/k/v split, head layout,
  // bias or mask would show.
  at::Generator g = at::make_generator<at::CPUGeneratorImpl>(2024);
  {
    torch::NoGradGuard no_grad;
    for (auto& [name, p] : model->spec_parameters()) p.normal_(0.0, 0.5, g);
  }
  at::Tensor idx = at::randint(32, {2, 8}, g, at::TensorOptions(at::kLong));
  at::Tensor targets = at::randint(32, {2, 8}, g, at::TensorOptions(at::kLong));
  const auto weights = (dir.path() / "weights.safetensors").string();
  const auto inputs = (dir.path() / "inputs.safetensors").string();
  const auto out = (dir.path() / "reference.safetensors").string();
  accel::train::save_safetensors(weights, model->spec_parameters());
  accel::train::save_safetensors(inputs, {{"idx", idx}, {"targets", targets}});

  auto run = run_python_script("gpt_reference.py", "forward " + shell_quote(weights) + " " + shell_quote(inputs) + " " +
                                                       shell_quote(out) + " --n-head 2");
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  auto reference = accel::train::load_safetensors(out);
  REQUIRE(reference.size() == 2);
  REQUIRE(reference[0].first == "logits");

  torch::NoGradGuard no_grad;
  at::Tensor logits = model->forward(idx);
  const double loss = token_cross_entropy(logits, targets).item<double>();
  const double logits_diff = (logits - reference[0].second).abs().max().item<double>();
  const double loss_diff = std::abs(loss - reference[1].second.item<double>());
  INFO("max |logits - reference| = " << logits_diff << ", |loss - reference| = " << loss_diff);
  // Both sides compute in fp32 the same math in a different op order (fused vs written-out
  // LayerNorm, GELU and cross-entropy; different matmul blockings). Logits here are O(1-10), so
  // rounding differences are ~1e-6 at most; 1e-5 leaves room for that, while any real
  // difference in the model (a mask, split or bias mistake) moves logits by 1e-2 or more.
  CHECK(logits_diff < 1e-5);
  CHECK(loss_diff < 1e-5);
  CHECK(logits.abs().max().item<double>() > 1.0);  // the comparison is not between tiny numbers
}

TEST_CASE("the seeded init is reproduced bit for bit by Python from the documented RNG order", "[model][python][init]") {
  accel::test::TempDir dir;
  auto model = make_builtin_module(gpt_section(/*n_layer=*/2, /*n_head=*/2, /*n_embd=*/16, /*vocab=*/32, /*block=*/8));
  model->initialize(1337);
  const auto out = (dir.path() / "init.safetensors").string();
  auto run = run_python_script("gpt_reference.py", "init " + shell_quote(out) +
                                                       " --n-layer 2 --n-embd 16 --vocab-size 32 --block-size 8 --seed 1337");
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  auto reference = accel::train::load_safetensors(out);
  auto params = model->spec_parameters();
  REQUIRE(reference.size() == params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    INFO(params[i].first);
    CHECK(reference[i].first == params[i].first);
    CHECK(at::equal(reference[i].second, params[i].second));
  }
}

ACCEL_ASSERT_CHECK_IS_CATCH();
