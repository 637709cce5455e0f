// Activation checkpointing (engine/activation_checkpoint.hpp, docs/design/0010): the
// recompute gives the plain backward's gradients bit for bit, accumulates parameter gradients into
// the existing .grad in place, replays random draws, falls back to a plain forward where nothing
// can be recomputed; in the built-in models (GptModule, MlpModule) with a recomputing unit sink,
// only the accel::Unit<> layers recompute and the hooks run once per use.
// With a sharding engine underneath: tests/engine/test_recompute_with_sharding.cpp.
#include "tests/support/catch_with_torch.hpp"

#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/function.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "api/unit_policy.hpp"
#include "api/unit_sink.hpp"
#include "engine/activation_checkpoint.hpp"
#include "tests/train/model/model_test_support.hpp"
#include "trainer/models/builtin_ops.hpp"

using accel::test::gpt_section;
using accel::test::llama_section;
using accel::test::mlp_section;
using accel::train::BuiltinModule;
using accel::engine::recompute_in_backward;
using accel::engine::UnitHooks;

namespace {

at::Tensor tokens(int64_t batch, int64_t seq_len, int64_t vocab) {
  return (at::arange(batch * seq_len, at::TensorOptions(at::kLong)) * 7 + 3).remainder(vocab).view({batch, seq_len});
}

// A parameter w [4, 4] whose .grad is a view of a flat buffer holding earlier gradients (as the
// sharding engine and the ddp buckets arrange), and an input leaf a [3, 4].
struct Problem {
  at::Tensor flat = at::arange(20, at::kFloat) * 0.01;  // 16 gradient values + 4 of something else
  at::Tensor w = at::randn({4, 4}, at::TensorOptions().dtype(at::kFloat)).set_requires_grad(true);
  at::Tensor a = at::randn({3, 4}, at::TensorOptions().dtype(at::kFloat)).set_requires_grad(true);
  int calls = 0;
  Problem() { w.mutable_grad() = flat.narrow(0, 2, 16).view({4, 4}); }
  at::Tensor body(const at::Tensor& x) {
    ++calls;
    return at::gelu(at::matmul(x, w), "tanh") + x * x;  // x used twice: its gradient is a sum
  }
};

// loss = sum(f(2a)^2) with f = the body, plain or recomputed.
void run(Problem& p, bool recompute) {
  at::Tensor x = p.a * 2.0;
  auto body = [&p](const at::Tensor& in) { return p.body(in); };
  at::Tensor y = recompute ? recompute_in_backward(body, x) : body(x);
  (y * y).sum().backward();
}

}  // namespace

TEST_CASE("recompute_in_backward: the plain gradients bit for bit, the body run twice, .grad filled in place",
          "[model][checkpoint]") {
  at::manual_seed(1);
  Problem plain;
  at::manual_seed(1);
  Problem recomputed;
  run(plain, false);
  const void* grad_storage = recomputed.w.grad().data_ptr();
  run(recomputed, true);
  CHECK(plain.calls == 1);
  CHECK(recomputed.calls == 2);  // the forward, and once more in backward
  CHECK(at::equal(plain.a.grad(), recomputed.a.grad()));
  CHECK(at::equal(plain.w.grad(), recomputed.w.grad()));
  // Accumulated into the flat buffer's view, not a new tensor; the values around it untouched.
  CHECK(recomputed.w.grad().data_ptr() == grad_storage);
  CHECK(at::equal(plain.flat, recomputed.flat));
  CHECK(recomputed.flat[0].item<float>() == 0.0f);
  CHECK(recomputed.flat[19].item<float>() == Approx(0.19));
}

TEST_CASE("recompute_in_backward: random draws are replayed and the generator's stream is not disturbed",
          "[model][checkpoint]") {
  auto run_dropout = [](bool recompute, double& next_draw) {
    at::manual_seed(5);
    at::Tensor w = at::randn({8, 8}).set_requires_grad(true);
    at::Tensor a = at::randn({6, 8}).set_requires_grad(true);
    auto body = [w](const at::Tensor& x) { return at::dropout(at::matmul(x, w), 0.5, /*train=*/true); };
    at::Tensor x = a * 1.0;
    at::Tensor y = recompute ? recompute_in_backward(body, x) : body(x);
    (y * y).sum().backward();
    next_draw = at::rand({1}).item<double>();
    return std::make_pair(w.grad(), a.grad());
  };
  double next_plain = 0, next_recomputed = 0;
  auto plain = run_dropout(false, next_plain);
  auto recomputed = run_dropout(true, next_recomputed);
  CHECK(at::equal(plain.first, recomputed.first));
  CHECK(at::equal(plain.second, recomputed.second));
  CHECK(next_plain == next_recomputed);  // the replay consumed nothing from the stream
}

TEST_CASE("recompute_in_backward: without grad mode, or with an input that needs no gradient, a plain forward",
          "[model][checkpoint]") {
  Problem p;
  {
    at::NoGradGuard no_grad;
    at::Tensor y = recompute_in_backward([&p](const at::Tensor& in) { return p.body(in); }, p.a * 2.0);
    CHECK_FALSE(y.requires_grad());
  }
  CHECK(p.calls == 1);
  // x without a gradient: the parameter's gradient must still arrive (stored, not recomputed).
  at::Tensor w_grad_before = p.w.grad().clone();
  at::Tensor y = recompute_in_backward([&p](const at::Tensor& in) { return p.body(in); }, p.a.detach());
  y.sum().backward();
  CHECK(p.calls == 2);
  CHECK_FALSE(at::equal(p.w.grad(), w_grad_before));
}

namespace {

// Records every hook call and the autograd node that produced each unit's output.
struct RecordingHooks : UnitHooks {
  std::map<const torch::nn::Module*, std::string> names;  // the wrappers' unit names
  std::vector<std::string> calls;
  std::map<std::string, std::string> output_node;
  at::Tensor pre_forward(torch::nn::Module& unit, at::Tensor x) override {
    calls.push_back("pre " + names.at(&unit));
    return x;
  }
  at::Tensor post_forward(torch::nn::Module& unit, at::Tensor y) override {
    calls.push_back("post " + names.at(&unit));
    output_node[names.at(&unit)] = y.grad_fn() ? y.grad_fn()->name() : "";
    return y;
  }
};

bool recomputed(const std::string& node) { return node.find("RecomputeInBackward") != std::string::npos; }

// The model's wrappers on a unit sink (as Accelerator::prepare attaches it) that calls `hooks`
// (nullptr: none) and recomputes each wrapper's forward in backward when `recompute`; the units'
// names by wrapper, for the hooks. Detach the sink when done.
std::shared_ptr<accel::detail::UnitSink> attach(BuiltinModule& model, UnitHooks* hooks, bool recompute,
                                                std::map<const torch::nn::Module*, std::string>* names = nullptr) {
  std::vector<std::pair<std::string, torch::nn::Module*>> boundaries;
  for (const auto& unit : accel::api::apply_unit_policy(model, {}))
    if (unit.boundary) {
      boundaries.emplace_back(unit.name, unit.boundary);
      if (names) (*names)[unit.boundary] = unit.name;
    }
  return accel::api::attach_unit_sink(boundaries, [hooks] { return hooks; }, "test", recompute);
}

// Loss and every parameter's gradient of one forward/backward.
std::vector<at::Tensor> gradients(const accel::config::ModelSection& section, bool checkpointing, at::Tensor& loss) {
  auto model = accel::train::make_builtin_module(section);
  model->initialize(11);
  auto sink = attach(*model, nullptr, checkpointing);
  loss = accel::train::token_cross_entropy(model->forward(tokens(3, 8, 32)), tokens(3, 8, 32).roll(1, 1));
  loss.backward();
  sink->detach();
  std::vector<at::Tensor> out;
  for (auto& [name, p] : model->spec_parameters()) out.push_back(p.grad());
  return out;
}

}  // namespace

TEST_CASE("gpt, mlp and llama: only the layer units recompute, and the hooks run once per use", "[model][checkpoint]") {
  auto gpt = accel::train::make_builtin_module(gpt_section(/*n_layer=*/3));
  gpt->initialize(4);
  RecordingHooks off;
  auto plain = attach(*gpt, &off, /*recompute=*/false, &off.names);
  gpt->forward(tokens(2, 8, 32));
  plain->detach();
  CHECK(off.calls == std::vector<std::string>{"pre h.0", "post h.0", "pre h.1", "post h.1", "pre h.2", "post h.2"});
  for (const auto& [unit, node] : off.output_node) CHECK_FALSE(recomputed(node));

  RecordingHooks on;
  auto recomputing = attach(*gpt, &on, /*recompute=*/true, &on.names);
  at::Tensor logits = gpt->forward(tokens(2, 8, 32));
  CHECK(on.calls == off.calls);
  for (const auto& unit : {"h.0", "h.1", "h.2"}) CHECK(recomputed(on.output_node[unit]));
  // The root's ops (the final norm, the tied unembedding) store their activations.
  REQUIRE(logits.grad_fn());
  CHECK_FALSE(recomputed(logits.grad_fn()->name()));
  accel::train::token_cross_entropy(logits, tokens(2, 8, 32)).backward();
  CHECK(on.calls == off.calls);  // the recompute in backward called no hook
  recomputing->detach();

  auto mlp = accel::train::make_builtin_module(mlp_section(/*n_layer=*/2));
  mlp->initialize(4);
  RecordingHooks layers;
  auto mlp_sink = attach(*mlp, &layers, /*recompute=*/true, &layers.names);
  mlp->forward(tokens(2, 8, 32));
  mlp_sink->detach();
  CHECK(layers.calls == std::vector<std::string>{"pre layer.0", "post layer.0", "pre layer.1", "post layer.1"});
  for (const auto& unit : {"layer.0", "layer.1"}) CHECK(recomputed(layers.output_node[unit]));

  auto llama = accel::train::make_builtin_module(llama_section(/*n_layer=*/2));
  llama->initialize(4);
  RecordingHooks decoder;
  auto llama_sink = attach(*llama, &decoder, /*recompute=*/true, &decoder.names);
  llama->forward(tokens(2, 8, 32));
  llama_sink->detach();
  CHECK(decoder.calls == std::vector<std::string>{"pre layers.0", "post layers.0", "pre layers.1", "post layers.1"});
  for (const auto& unit : {"layers.0", "layers.1"}) CHECK(recomputed(decoder.output_node[unit]));
}

TEST_CASE("gpt, mlp and llama: loss and every gradient equal bit for bit with and without recompute, fp32 and bf16",
          "[model][checkpoint]") {
  auto bf16 = gpt_section(2);
  bf16.dtype = accel::config::ParamDtype::bf16;
  auto llama_bf16 = llama_section(2, /*tied=*/true, /*biases=*/true);
  llama_bf16.dtype = accel::config::ParamDtype::bf16;
  for (const auto& section : {gpt_section(2), mlp_section(3), bf16, llama_section(2), llama_bf16}) {
    INFO(accel::config::to_string(section.name) << " " << accel::config::to_string(section.dtype));
    at::Tensor loss_plain, loss_recomputed;
    auto plain = gradients(section, false, loss_plain);
    auto recomputed = gradients(section, true, loss_recomputed);
    CHECK(at::equal(loss_plain, loss_recomputed));
    REQUIRE(plain.size() == recomputed.size());
    for (size_t i = 0; i < plain.size(); ++i) {
      INFO("parameter " << i);
      REQUIRE(recomputed[i].defined());
      CHECK(at::equal(plain[i], recomputed[i]));
    }
  }
}

ACCEL_ASSERT_CHECK_IS_CATCH();
