// The built-in models' forward (GptModule, MlpModule) and loss: shapes, causality, loss at init,
// the loss formula, sequence-length limits, gradients reaching every parameter, and a bf16 model.
#include "tests/support/catch_with_torch.hpp"

#include <cmath>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/csrc/autograd/autograd.h>

#include "tests/train/model/model_test_support.hpp"
#include "trainer/models/builtin_ops.hpp"

using accel::test::gpt_section;
using accel::test::mlp_section;
using accel::test::parameter;
using accel::train::make_builtin_module;
using accel::train::token_cross_entropy;

namespace {
at::Tensor random_tokens(int64_t batch, int64_t seq_len, int64_t vocab, uint64_t seed) {
  at::Generator g = at::make_generator<at::CPUGeneratorImpl>(seed);
  return at::randint(vocab, {batch, seq_len}, g, at::TensorOptions(at::kLong));
}
}  // namespace

TEST_CASE("gpt forward gives [B, T, V] logits in the model dtype", "[model][forward]") {
  auto model = make_builtin_module(gpt_section());
  model->initialize(1);
  at::Tensor logits = model->forward(random_tokens(3, 5, 32, 1));  // T < block_size is fine
  CHECK(logits.sizes() == at::IntArrayRef{3, 5, 32});
  CHECK(logits.scalar_type() == at::kFloat);
}

TEST_CASE("gpt is causal: tokens after t do not change logits at positions <= t", "[model][forward]") {
  auto model = make_builtin_module(gpt_section(2, 2, 16, 32, 8));
  model->initialize(11);
  at::Tensor idx = random_tokens(2, 8, 32, 2);
  at::Tensor logits = model->forward(idx);
  for (int64_t t = 0; t + 1 < 8; ++t) {
    INFO("t = " << t);
    at::Tensor changed = idx.clone();
    changed.narrow(1, t + 1, 8 - t - 1).copy_((idx.narrow(1, t + 1, 8 - t - 1) + 1 + t) % 32);
    at::Tensor other = model->forward(changed);
    // Masked scores are exactly 0 after softmax, so only op-order noise could differ; 1e-6 is
    // far below the changes a leak makes (checked right below).
    CHECK((other.narrow(1, 0, t + 1) - logits.narrow(1, 0, t + 1)).abs().max().item<double>() < 1e-6);
    CHECK((other.narrow(1, t + 1, 1) - logits.narrow(1, t + 1, 1)).abs().max().item<double>() > 1e-4);
  }
}

TEST_CASE("gpt loss at init is close to ln(V)", "[model][forward]") {
  // At init ln_f's output has unit variance per channel and wte ~ N(0, 0.02), so logits are about
  // N(0, 0.02^2 * C): for C = 64 the expected loss is ln(V) + 0.0004 * 64 / 2 = ln(V) + 0.013.
  // 0.05 allows that plus sampling noise, and still catches any real mistake (untied, unscaled).
  auto model = make_builtin_module(gpt_section(/*n_layer=*/2, /*n_head=*/4, /*n_embd=*/64, /*vocab=*/256, /*block=*/32));
  model->initialize(1337);
  at::Tensor idx = random_tokens(4, 32, 256, 3);
  at::Tensor targets = random_tokens(4, 32, 256, 4);
  const double loss = token_cross_entropy(model->forward(idx), targets).item<double>();
  CHECK(std::abs(loss - std::log(256.0)) < 0.05);
}

TEST_CASE("mlp forward and loss at init", "[model][forward][mlp]") {
  auto model = make_builtin_module(mlp_section(3, 32, 64));
  model->initialize(9);
  at::Tensor logits = model->forward(random_tokens(2, 7, 64, 5));  // no position table: any T
  CHECK(logits.sizes() == at::IntArrayRef{2, 7, 64});
  // Logits are tiny at init (each layer shrinks activations), so the loss is ln(V) to 1e-2.
  CHECK(std::abs(token_cross_entropy(logits, random_tokens(2, 7, 64, 6)).item<double>() - std::log(64.0)) < 1e-2);
}

TEST_CASE("loss is the mean token cross-entropy", "[model][forward]") {
  at::Generator g = at::make_generator<at::CPUGeneratorImpl>(8);
  at::Tensor logits = at::randn({2, 3, 32}, g, at::TensorOptions(at::kFloat));
  at::Tensor targets = random_tokens(2, 3, 32, 9);
  at::Tensor log_probs = at::log_softmax(logits, -1);
  at::Tensor expected = -log_probs.gather(-1, targets.unsqueeze(-1)).mean();
  CHECK(token_cross_entropy(logits, targets).item<double>() == Approx(expected.item<double>()).epsilon(1e-6));
  CHECK_THROWS_AS(token_cross_entropy(logits, targets.narrow(1, 0, 2)), std::invalid_argument);
}

TEST_CASE("gpt rejects sequences longer than block_size and non-int64 tokens", "[model][forward]") {
  auto model = make_builtin_module(gpt_section(2, 2, 16, 32, /*block=*/8));
  CHECK_THROWS_WITH(model->forward(random_tokens(1, 9, 32, 1)), Catch::Contains("block_size 8"));
  CHECK_THROWS_AS(model->forward(random_tokens(1, 4, 32, 1).to(at::kInt)), std::invalid_argument);
}

TEST_CASE("backward reaches every parameter, wte from both of its uses", "[model][forward]") {
  auto model = make_builtin_module(gpt_section());
  model->initialize(21);
  at::Tensor idx = random_tokens(2, 8, 32, 10);
  token_cross_entropy(model->forward(idx), random_tokens(2, 8, 32, 11)).backward();
  for (auto& [name, p] : model->spec_parameters()) {
    INFO(name);
    REQUIRE(p.grad().defined());
    CHECK(p.grad().abs().sum().item<double>() > 0.0);
  }
  // Tokens that never occur as input still get a wte gradient, through the unembedding.
  at::Tensor grad_rows = parameter(*model, "wte.weight").grad().abs().sum(1);
  at::Tensor used = at::zeros({32}, at::kBool).index_fill_(0, idx.flatten(), true);
  CHECK((grad_rows.masked_select(used.logical_not()) > 0).all().item<bool>());
}

TEST_CASE("a bf16 gpt runs forward and backward in bf16", "[model][forward][bf16]") {
  auto section = gpt_section(2, 2, 32, 64, 16);
  section.dtype = accel::config::ParamDtype::bf16;
  auto model = make_builtin_module(section);
  model->initialize(4);
  at::Tensor logits = model->forward(random_tokens(2, 16, 64, 12));
  CHECK(logits.scalar_type() == at::kBFloat16);
  at::Tensor loss = token_cross_entropy(logits, random_tokens(2, 16, 64, 13));
  CHECK(loss.scalar_type() == at::kFloat);
  // bf16 keeps 8 bits of mantissa: logits carry ~0.4% relative error, ample for 0.1 at ln(64).
  CHECK(std::abs(loss.item<double>() - std::log(64.0)) < 0.1);
  loss.backward();
  for (auto& [name, p] : model->spec_parameters()) {
    INFO(name);
    REQUIRE(p.grad().defined());
    CHECK(p.grad().scalar_type() == at::kBFloat16);
    CHECK(std::isfinite(p.grad().to(at::kFloat).sum().item<double>()));
  }
}

ACCEL_ASSERT_CHECK_IS_CATCH();
