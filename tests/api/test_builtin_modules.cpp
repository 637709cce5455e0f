// The built-in models as modules (trainer/models/builtin_module.hpp: GptModule, MlpModule)
// against tests/train/model/gpt_reference.py, an independent implementation of spec/training.md in
// Python torch: the spec names in spec order and the seeded init bit for bit, and the logits and
// loss on random weights, for gpt and mlp.
#include "tests/support/catch_with_torch.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <cmath>

#include "runtime/common/errors.hpp"
#include "trainer/models/builtin_ops.hpp"
#include "engine/format/safetensors.hpp"
#include "trainer/models/builtin_module.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/train/model/model_test_support.hpp"

namespace {

using accel::config::ModelName;
using accel::config::ModelSection;
using accel::test::run_python_script;
using accel::test::shell_quote;

ModelSection small(ModelName name) {
  ModelSection s;
  s.name = name;
  s.n_layer = 3;
  s.n_head = 4;
  s.n_embd = 32;
  s.vocab_size = 50;
  s.block_size = 16;
  return s;
}

std::string model_flag(const ModelSection& s) { return " --model " + accel::config::to_string(s.name); }

}  // namespace

TEST_CASE("built-in models as modules: spec names and the seeded init equal the Python reference's", "[api][builtin]") {
  for (ModelName name : {ModelName::gpt, ModelName::mlp}) {
    const ModelSection section = small(name);
    CAPTURE(accel::config::to_string(name));
    auto module = accel::train::make_builtin_module(section);
    module->initialize(7);
    accel::test::TempDir dir;
    const auto out = (dir.path() / "init.safetensors").string();
    auto run = run_python_script("gpt_reference.py", "init " + shell_quote(out) + model_flag(section) +
                                                         " --n-layer 3 --n-embd 32 --vocab-size 50 --block-size 16 --seed 7");
    INFO(run.output);
    REQUIRE(run.exit_code == 0);
    const auto want = accel::engine::load_safetensors(out);
    const auto got = module->spec_parameters();
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      INFO(want[i].first);
      CHECK(got[i].first == want[i].first);
      CHECK(at::equal(got[i].second, want[i].second));
    }
    // Not a vacuous comparison: init drew non-zero weights.
    CHECK(got.front().second.abs().sum().item<double>() > 0);
  }
}

TEST_CASE("built-in models as modules: logits and loss match the Python reference on random weights", "[api][builtin]") {
  for (ModelName name : {ModelName::gpt, ModelName::mlp}) {
    const ModelSection section = small(name);
    CAPTURE(accel::config::to_string(name));
    auto module = accel::train::make_builtin_module(section);
    // Random values for every parameter (biases and LayerNorm too), large enough that the logits
    // are far from the init's small values: a wrong layer, activation, bias or tie would show. The
    // mlp has no norm between its layers: a smaller spread keeps its logits of O(1-10) too.
    const double spread = name == ModelName::gpt ? 0.5 : 0.25;
    at::Generator g = at::make_generator<at::CPUGeneratorImpl>(2025);
    {
      torch::NoGradGuard no_grad;
      for (auto& [n, p] : module->spec_parameters()) p.normal_(0.0, spread, g);
    }
    at::Tensor idx = at::randint(section.vocab_size, {2, 12}, g, at::TensorOptions(at::kLong));
    at::Tensor targets = at::randint(section.vocab_size, {2, 12}, g, at::TensorOptions(at::kLong));
    accel::test::TempDir dir;
    const auto weights = (dir.path() / "weights.safetensors").string();
    const auto inputs = (dir.path() / "inputs.safetensors").string();
    const auto out = (dir.path() / "reference.safetensors").string();
    accel::engine::save_safetensors(weights, module->spec_parameters());
    accel::engine::save_safetensors(inputs, {{"idx", idx}, {"targets", targets}});
    auto run = run_python_script("gpt_reference.py", "forward " + shell_quote(weights) + " " + shell_quote(inputs) + " " +
                                                         shell_quote(out) + model_flag(section) + " --n-head 4");
    INFO(run.output);
    REQUIRE(run.exit_code == 0);
    const auto reference = accel::engine::load_safetensors(out);
    REQUIRE(reference.size() == 2);
    REQUIRE(reference[0].first == "logits");

    torch::NoGradGuard no_grad;
    const at::Tensor logits = module->forward(idx);
    CHECK(logits.sizes() == at::IntArrayRef{2, 12, section.vocab_size});
    const double loss = accel::train::token_cross_entropy(logits, targets).item<double>();
    const double logits_diff = (logits - reference[0].second).abs().max().item<double>();
    const double loss_diff = std::abs(loss - reference[1].second.item<double>());
    INFO("max |logits - reference| = " << logits_diff << ", |loss - reference| = " << loss_diff);
    // Both sides compute in fp32 the same math in another op order (fused vs written-out
    // LayerNorm, GELU and cross-entropy; different matmul blockings); logits of O(1-10) round
    // differently by ~1e-6 at most, while a mistake in the model (a mask, split or bias) moves
    // them by 1e-2 or more.
    CHECK(logits_diff < 1e-5);
    CHECK(loss_diff < 1e-5);
    CHECK(logits.abs().max().item<double>() > 1.0);  // the comparison is not between tiny numbers
  }
}

TEST_CASE("built-in models as modules: a section no model fits is a ConfigError naming the key", "[api][builtin]") {
  ModelSection bad = small(ModelName::gpt);
  bad.n_embd = 30;  // not a multiple of n_head 4
  CHECK_THROWS_AS(accel::train::make_builtin_module(bad), accel::ConfigError);
  try {
    accel::train::make_builtin_module(bad);
  } catch (const accel::ConfigError& e) {
    CHECK_THAT(std::string(e.what()), Catch::Matchers::Contains("model.n_embd"));
  }
}
