// The chunked head and cross-entropy (trainer/models/chunked_cross_entropy.hpp) against the plain
// path (token_cross_entropy of at::linear's logits): the loss and both gradients, fp32 and bf16, in
// several chunkings; the gradient-scale hint; the tied table's lookup adding into the head's
// gradient; the built-in models' loss(); no gradients under no-grad.
//
// Bounds: the chunked path computes the plain path's sums in other groupings (the loss over chunk
// sums, the head's gradient over chunks of tokens; bf16 rounds the running [V, C] gradient once per
// chunk), so it differs from the exact value by rounding of the plain path's size. The exact value
// is the same computation in fp64 from the same inputs; the plain path's distance from it per
// quantity (the loss relative, each gradient its largest element) is the noise, and the chunked
// path must be within FACTOR x noise of the plain path, at least FLOOR_ULPS ulps of the quantity
// (tests/numerics/reordering_noise.py: same FACTOR and floor, and why). With at most 4 chunks in
// bf16, the chunked [V, C] gradient carries up to 4 roundings where the plain one carries 1.
#include "tests/support/catch_with_torch.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include <ATen/CPUGeneratorImpl.h>

#include "tests/train/model/model_test_support.hpp"
#include "trainer/models/builtin_ops.hpp"
#include "trainer/models/chunked_cross_entropy.hpp"

using accel::train::ChunkedLossOptions;
using accel::train::chunked_token_cross_entropy;
using accel::train::token_cross_entropy;

namespace {

constexpr double kFactor = 8;    // reordering_noise.FACTOR
constexpr double kFloorUlps = 4;  // reordering_noise.FLOOR_ULPS

struct Result {
  double loss = 0;
  at::Tensor grad_hidden, grad_weight;  // in fp64
};

at::Generator generator(uint64_t seed) { return at::make_generator<at::CPUGeneratorImpl>(seed); }

struct Inputs {
  at::Tensor hidden, weight, targets;
};

// Logits of a trained model's size: hidden of unit scale, weights ~ N(0, 0.3) so the softmax is not
// uniform (a uniform softmax would hide a wrong target term less than a peaked one).
Inputs inputs(int64_t b, int64_t t, int64_t c, int64_t v, at::ScalarType dtype, uint64_t seed) {
  at::Generator g = generator(seed);
  Inputs in;
  in.hidden = at::randn({b, t, c}, g, at::kFloat).to(dtype);
  in.weight = (at::randn({v, c}, g, at::kFloat) * 0.3).to(dtype);
  in.targets = at::randint(v, {b, t}, g, at::TensorOptions(at::kLong));
  return in;
}

Result run(const Inputs& in, at::ScalarType dtype, int64_t chunk_tokens, double backward_scale = 1.0,
           double hint = 1.0) {
  at::Tensor h = in.hidden.to(dtype).detach().requires_grad_(true);
  at::Tensor w = in.weight.to(dtype).detach().requires_grad_(true);
  at::Tensor loss;
  if (dtype == at::kDouble)  // the exact value: the plain path without its fp32 cast
    loss = at::cross_entropy_loss(at::linear(h, w).reshape({-1, w.size(0)}), in.targets.reshape({-1}));
  else if (chunk_tokens == 0)
    loss = token_cross_entropy(at::linear(h, w), in.targets);
  else
    loss = chunked_token_cross_entropy(h, w, in.targets, {chunk_tokens, hint, {}});
  (loss * backward_scale).backward();
  return {loss.item<double>(), h.grad().to(at::kDouble), w.grad().to(at::kDouble)};
}

double largest_diff(const at::Tensor& a, const at::Tensor& b) { return (a - b).abs().max().item<double>(); }

// FLOOR_ULPS spacings of `dtype` at the tensor's largest magnitude.
double floor_of(const at::Tensor& t, at::ScalarType dtype) {
  const double m = t.abs().max().item<double>();
  const double eps = dtype == at::kBFloat16 ? std::pow(2.0, -7) : std::pow(2.0, -23);
  return kFloorUlps * eps * std::pow(2.0, std::floor(std::log2(std::max(m, 1e-30))));
}

// Bounds from the plain path's distance to fp64, then the chunked run checked against the plain one.
struct Bounds {
  double loss_rtol, hidden_atol, weight_atol;
};

Bounds derive(const Result& plain, const Result& exact, at::ScalarType dtype) {
  const double loss_noise = std::abs(plain.loss - exact.loss) / std::abs(exact.loss);
  const double loss_floor = kFloorUlps * std::pow(2.0, -23);  // the loss is fp32 in every dtype
  return {std::max(kFactor * loss_noise, loss_floor),
          std::max(kFactor * largest_diff(plain.grad_hidden, exact.grad_hidden), floor_of(exact.grad_hidden, dtype)),
          std::max(kFactor * largest_diff(plain.grad_weight, exact.grad_weight), floor_of(exact.grad_weight, dtype))};
}

// The largest share of its bound any quantity used, over the checks (printed: above 1 failed).
double g_usage = 0;

void check_within(const Result& got, const Result& plain, const Bounds& b, const std::string& what) {
  INFO(what << ": bounds loss " << b.loss_rtol << ", grad hidden " << b.hidden_atol << ", grad weight "
            << b.weight_atol);
  const double loss = std::abs(got.loss - plain.loss) / std::abs(plain.loss);
  const double hidden = largest_diff(got.grad_hidden, plain.grad_hidden);
  const double weight = largest_diff(got.grad_weight, plain.grad_weight);
  CHECK(loss <= b.loss_rtol);
  CHECK(hidden <= b.hidden_atol);
  CHECK(weight <= b.weight_atol);
  g_usage = std::max({g_usage, loss / b.loss_rtol, hidden / b.hidden_atol, weight / b.weight_atol});
}

}  // namespace

TEST_CASE("chunked loss: loss and gradients within the plain path's rounding, fp32 and bf16", "[model][chunked_loss]") {
  // 111 tokens: chunkings that divide it unevenly, one token a chunk, and one chunk of all.
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    const Inputs in = inputs(3, 37, 48, 517, dtype, 5);
    const Result plain = run(in, dtype, 0);
    const Result exact = run(in, at::kDouble, 0);
    const Bounds b = derive(plain, exact, dtype);
    const std::vector<int64_t> chunks =
        dtype == at::kFloat ? std::vector<int64_t>{1, 16, 50, 111, 4096} : std::vector<int64_t>{28, 50, 111, 4096};
    for (int64_t chunk : chunks) {
      const Result got = run(in, dtype, chunk);
      check_within(got, plain, b, std::string(c10::toString(dtype)) + ", chunks of " + std::to_string(chunk));
    }
    WARN(c10::toString(dtype) << ": the largest share of a bound used so far " << g_usage);
  }
}

TEST_CASE("chunked loss: the gradient-scale hint changes rounding only", "[model][chunked_loss]") {
  // The trainer passes the incoming gradient it expects (fp16 scale / accumulation steps); another
  // incoming gradient than the hint is rescaled in backward, in either direction.
  const Inputs in = inputs(2, 20, 32, 300, at::kFloat, 7);
  for (double scale : {1.0 / 3.0, 1024.0}) {
    const Result plain = run(in, at::kFloat, 0, scale);
    const Result exact = run(in, at::kDouble, 0, scale);
    const Bounds b = derive(plain, exact, at::kFloat);
    check_within(run(in, at::kFloat, 16, scale, scale), plain, b, "hint equal to the incoming gradient");
    check_within(run(in, at::kFloat, 16, scale, 1.0), plain, b, "hint 1");
    check_within(run(in, at::kFloat, 16, scale, 64.0 * scale), plain, b, "hint 64x the incoming gradient");
  }
}

TEST_CASE("chunked loss: under no grad only the loss, and bad arguments are named", "[model][chunked_loss]") {
  const Inputs in = inputs(2, 9, 16, 40, at::kFloat, 9);
  at::Tensor h = in.hidden.clone().requires_grad_(true);
  const double with_grad = chunked_token_cross_entropy(h, in.weight, in.targets, {4, 1.0, {}}).item<double>();
  {
    at::NoGradGuard no_grad;
    at::Tensor loss = chunked_token_cross_entropy(h, in.weight, in.targets, {4, 1.0, {}});
    CHECK_FALSE(loss.requires_grad());
    CHECK(loss.item<double>() == with_grad);  // the same ops on the same values
  }
  CHECK_THROWS_WITH(chunked_token_cross_entropy(h, in.weight, in.targets.narrow(1, 0, 3), {4, 1.0, {}}),
                    Catch::Contains("targets [B, T]"));
  CHECK_THROWS_WITH(chunked_token_cross_entropy(h, in.weight.to(at::kBFloat16), in.targets, {4, 1.0, {}}),
                    Catch::Contains("one floating dtype"));
  CHECK_THROWS_WITH(chunked_token_cross_entropy(h, in.weight, in.targets, {0, 1.0, {}}), Catch::Contains("chunk_tokens"));
  // The gradients formed in forward are handed on once.
  at::Tensor loss = chunked_token_cross_entropy(h, in.weight, in.targets, {4, 1.0, {}});
  loss.backward({}, /*retain_graph=*/true);
  CHECK_THROWS_WITH(loss.backward(), Catch::Contains("retain_graph"));
}

TEST_CASE("tied table lookup: its rows go into the head's gradient, or its own without one", "[model][chunked_loss]") {
  // Integer-valued gradients: every sum is exact in any order, so the results are compared exactly.
  at::Generator g = generator(13);
  const at::Tensor table = at::randn({10, 4}, g, at::kFloat);
  const at::Tensor idx = at::randint(10, {2, 6}, g, at::TensorOptions(at::kLong));  // repeats rows
  const at::Tensor upstream = at::randint(-8, 8, {2, 6, 4}, g, at::TensorOptions(at::kFloat));
  const at::Tensor head = at::randint(-8, 8, {10, 4}, g, at::TensorOptions(at::kFloat));
  const at::Tensor dense = at::embedding_dense_backward(upstream, idx, 10, -1, false);
  for (bool with_head : {false, true}) {
    INFO("a head gradient in the slot: " << with_head);
    auto tied = c10::make_intrusive<accel::train::TiedTableGradient>();
    at::Tensor t = table.clone().requires_grad_(true);
    at::Tensor x = accel::train::tied_table_lookup(t, idx, tied);
    CHECK(at::equal(x, at::embedding(table, idx)));
    at::Tensor into = head.clone();
    if (with_head) tied->head_grad = into;
    x.backward(upstream);
    if (with_head) {
      CHECK_FALSE(t.grad().defined());  // the rows went into the head's gradient, none of its own
      CHECK(at::equal(into, head + dense));
      CHECK_FALSE(tied->head_grad.defined());  // taken: autograd's reference is the only one again
    } else {
      CHECK(at::equal(t.grad(), dense));
    }
  }
}

namespace {

// Every parameter's gradient of model.loss(idx, targets, chunk), in fp64.
// chunk -1: the exact value, the plain path in the model's dtype without token_cross_entropy's fp32 cast.
std::vector<std::pair<std::string, at::Tensor>> model_grads(accel::train::BuiltinModule& model, const at::Tensor& idx,
                                                            const at::Tensor& targets, int64_t chunk, double* loss) {
  model.zero_grad(/*set_to_none=*/true);
  at::Tensor l = chunk >= 0 ? model.loss(idx, targets, chunk)
                            : at::cross_entropy_loss(model.forward(idx).flatten(0, 1), targets.flatten());
  l.backward();
  *loss = l.item<double>();
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (auto& [name, p] : model.spec_parameters()) {
    REQUIRE(p.grad().defined());
    out.emplace_back(name, p.grad().to(at::kDouble));
  }
  return out;
}

}  // namespace

TEST_CASE("chunked loss: the built-in models' loss() agrees with the plain path in every parameter",
          "[model][chunked_loss]") {
  // gpt and mlp tie their head with the token table (its lookup then adds into the head's gradient),
  // llama ties it or not. The same model in fp64 is the exact value (llama's RMSNorm computes in
  // fp32 there too, as transformers' does: its rounding joins the noise, of the same size).
  for (const auto& [what, section] :
       std::vector<std::pair<std::string, accel::config::ModelSection>>{
           {"gpt", accel::test::gpt_section(2, 2, 32, 97, 16)},
           {"mlp", accel::test::mlp_section(2, 32, 97)},
           {"llama untied", accel::test::llama_section(2, false)},
           {"llama tied", accel::test::llama_section(2, true)}}) {
    INFO(what);
    auto model = accel::train::make_builtin_module(section);
    model->initialize(3);
    const int64_t vocab = section.vocab_size;
    at::Generator g = generator(11);
    const at::Tensor idx = at::randint(vocab, {3, 8}, g, at::TensorOptions(at::kLong));
    const at::Tensor targets = at::randint(vocab, {3, 8}, g, at::TensorOptions(at::kLong));
    double plain_loss = 0, chunked_loss = 0, exact_loss = 0;
    const auto plain = model_grads(*model, idx, targets, 0, &plain_loss);
    const auto chunked = model_grads(*model, idx, targets, 5, &chunked_loss);
    model->to(at::kDouble);
    const auto exact = model_grads(*model, idx, targets, -1, &exact_loss);
    CHECK(std::abs(chunked_loss - plain_loss) <=
          std::max(kFactor * std::abs(plain_loss - exact_loss), kFloorUlps * std::pow(2.0, -23) * plain_loss));
    for (size_t i = 0; i < plain.size(); ++i) {
      INFO(plain[i].first);
      const double noise = largest_diff(plain[i].second, exact[i].second);
      const double bound = std::max(kFactor * noise, floor_of(exact[i].second, at::kFloat));
      const double d = largest_diff(chunked[i].second, plain[i].second);
      CHECK(d <= bound);
      g_usage = std::max(g_usage, d / bound);
    }
    WARN(what << ": the largest share of a bound used so far " << g_usage);
  }
}

ACCEL_ASSERT_CHECK_IS_CATCH();
