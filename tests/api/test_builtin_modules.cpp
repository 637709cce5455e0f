// The built-in models as modules (runtime/train/modules/builtin_module.hpp) against the train::Model
// form the trainer runs today: the same parameter names in the same order, the same seeded init,
// and the same logits, bitwise (the same ops in the same order), for gpt and mlp.
#include "tests/support/catch_with_torch.hpp"

#include <torch/torch.h>

#include "runtime/common/errors.hpp"
#include "runtime/train/model/model.hpp"
#include "runtime/train/modules/builtin_module.hpp"

namespace {

using accel::config::ModelName;
using accel::config::ModelSection;

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

}  // namespace

TEST_CASE("built-in models as modules: spec names, init and logits equal the train::Model form", "[api][builtin]") {
  for (ModelName name : {ModelName::gpt, ModelName::mlp}) {
    const ModelSection section = small(name);
    CAPTURE(accel::config::to_string(name));
    auto model = accel::train::make_model(section);
    model->initialize(7);
    auto module = accel::train::make_builtin_module(section);
    module->initialize(7);

    const auto want = model->named_parameters();
    const auto got = module->spec_parameters();
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      CHECK(got[i].first == want[i].first);
      CHECK(at::equal(got[i].second, want[i].second));
    }
    // Not a vacuous comparison: init drew non-zero weights.
    CHECK(got.front().second.abs().sum().item<double>() > 0);

    auto idx = torch::randint(section.vocab_size, {2, 12}, at::TensorOptions().dtype(at::kLong));
    const at::Tensor expected = model->forward(idx);
    const at::Tensor logits = module->forward(idx);
    CHECK(at::equal(logits, expected));
    CHECK(logits.sizes() == at::IntArrayRef{2, 12, section.vocab_size});
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
