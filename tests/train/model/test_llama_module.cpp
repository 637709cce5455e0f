// The llama model as a module (trainer/models/llama_module.hpp): transformers' parameter names
// (without "model.") in transformers' order (but lm_head second) with their shapes, the tied head's
// absence, the spec init's rule per name, causality, and the sections it refuses. Numbers against transformers:
// tests/numerics/test_llama.py.
#include "tests/support/catch_with_torch.hpp"

#include "runtime/common/errors.hpp"
#include "runtime/hf/hf_family.hpp"
#include "tests/train/model/model_test_support.hpp"
#include "trainer/models/spec_init.hpp"

using accel::test::llama_section;

namespace {

std::vector<std::pair<std::string, std::vector<int64_t>>> names_and_shapes(const accel::config::ModelSection& s) {
  std::vector<std::pair<std::string, std::vector<int64_t>>> out;
  for (const auto& [name, p] : accel::train::make_builtin_module(s)->spec_parameters()) out.emplace_back(name, p.sizes().vec());
  return out;
}

}  // namespace

TEST_CASE("llama: transformers' names below model., its order (lm_head second) and shapes; lm_head when untied",
          "[model][llama]") {
  using V = std::vector<int64_t>;
  // n_embd 16, 4 heads of 4, 2 key/value heads, SwiGLU 24, vocab 32.
  const std::vector<std::pair<std::string, V>> layer = {
      {"self_attn.q_proj.weight", {16, 16}}, {"self_attn.k_proj.weight", {8, 16}}, {"self_attn.v_proj.weight", {8, 16}},
      {"self_attn.o_proj.weight", {16, 16}}, {"mlp.gate_proj.weight", {24, 16}},   {"mlp.up_proj.weight", {24, 16}},
      {"mlp.down_proj.weight", {16, 24}},    {"input_layernorm.weight", {16}},     {"post_attention_layernorm.weight", {16}}};
  // lm_head right after embed_tokens: the spec init's draw order (the root unit is built first).
  std::vector<std::pair<std::string, V>> expected = {{"embed_tokens.weight", {32, 16}}, {"lm_head.weight", {32, 16}}};
  for (int i = 0; i < 2; ++i)
    for (const auto& [name, shape] : layer) expected.emplace_back("layers." + std::to_string(i) + "." + name, shape);
  expected.emplace_back("norm.weight", V{16});
  CHECK(names_and_shapes(llama_section(2)) == expected);
  expected.erase(expected.begin() + 1);
  CHECK(names_and_shapes(llama_section(2, /*tied=*/true)) == expected);

  const auto biased = names_and_shapes(llama_section(1, false, /*biases=*/true));
  std::vector<std::string> biases;
  for (const auto& [name, shape] : biased)
    if (name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0) biases.push_back(name);
  CHECK(biases == std::vector<std::string>{"layers.0.self_attn.q_proj.bias", "layers.0.self_attn.k_proj.bias",
                                           "layers.0.self_attn.v_proj.bias", "layers.0.self_attn.o_proj.bias",
                                           "layers.0.mlp.gate_proj.bias", "layers.0.mlp.up_proj.bias",
                                           "layers.0.mlp.down_proj.bias"});
}

TEST_CASE("llama spec init: norms 1, biases 0, every other weight N(0, 0.02) with no depth scaling", "[model][llama][init]") {
  using accel::train::InitRule;
  using accel::train::spec_init_rule;
  for (const char* name : {"layers.3.input_layernorm.weight", "layers.0.post_attention_layernorm.weight", "norm.weight"})
    CHECK(spec_init_rule(name, 4).kind == InitRule::Kind::ones);
  CHECK(spec_init_rule("layers.0.self_attn.o_proj.bias", 4).kind == InitRule::Kind::zeros);
  for (const char* name : {"embed_tokens.weight", "layers.1.self_attn.o_proj.weight", "layers.1.mlp.down_proj.weight",
                           "lm_head.weight"}) {
    const InitRule rule = spec_init_rule(name, 4);
    CHECK(rule.kind == InitRule::Kind::normal);
    CHECK(rule.std == 0.02);
  }
  auto model = accel::train::make_builtin_module(llama_section(2, false, true));
  model->initialize(5);
  CHECK(at::equal(accel::test::parameter(*model, "norm.weight"), at::ones({16})));
  CHECK(at::equal(accel::test::parameter(*model, "layers.1.mlp.up_proj.bias"), at::zeros({24})));
  const double std = accel::test::parameter(*model, "layers.0.mlp.gate_proj.weight").std().item<double>();
  CHECK(std > 0.015);
  CHECK(std < 0.025);
}

TEST_CASE("llama forward: logits [B, T, V]; position t depends on tokens <= t only", "[model][llama]") {
  auto model = accel::train::make_builtin_module(llama_section(2));
  model->initialize(3);
  torch::NoGradGuard no_grad;
  at::Tensor idx = at::randint(0, 32, {2, 8}, at::TensorOptions(at::kLong));
  const at::Tensor logits = model->forward(idx);
  CHECK(logits.sizes() == at::IntArrayRef({2, 8, 32}));
  at::Tensor changed = idx.clone();
  changed.select(1, 5).copy_((idx.select(1, 5) + 1) % 32);
  const at::Tensor after = model->forward(changed);
  CHECK(at::equal(logits.narrow(1, 0, 5), after.narrow(1, 0, 5)));
  CHECK_FALSE(at::allclose(logits.narrow(1, 5, 3), after.narrow(1, 5, 3)));
  CHECK_THROWS_WITH(model->forward(at::zeros({1, 9}, at::kLong)), Catch::Contains("block_size"));
}

TEST_CASE("llama sections it cannot build are refused naming the key", "[model][llama]") {
  auto s = llama_section(2);
  s.n_kv_head = 3;
  CHECK_THROWS_AS(accel::train::make_builtin_module(s), accel::ConfigError);
  CHECK_THROWS_WITH(accel::train::make_builtin_module(s), Catch::Contains("model.n_kv_head"));
  s = llama_section(2);
  s.head_dim = 3;
  CHECK_THROWS_WITH(accel::train::make_builtin_module(s), Catch::Contains("model.head_dim"));
}

// runtime/hf/hf_family.cpp's LlamaForCausalLM table must list exactly the module's parameters, in
// its order and shapes, under transformers' names ("model." + accel's, lm_head.weight as it is).
TEST_CASE("llama: the Hugging Face table matches the module (GQA, tied, biases, Mistral's name)", "[model][llama][hf]") {
  auto sections = std::vector<accel::config::ModelSection>{llama_section(2), llama_section(2, /*tied=*/true),
                                                           llama_section(1, false, /*biases=*/true)};
  accel::config::ModelSection mistral = llama_section(1);
  mistral.sliding_window = 64;
  sections.push_back(mistral);
  for (const auto& s : sections) {
    const accel::hf::Family family = accel::hf::family_for(s);
    CHECK(family.architecture == (s.sliding_window > 0 ? "MistralForCausalLM" : "LlamaForCausalLM"));
    std::vector<std::pair<std::string, std::vector<int64_t>>> table;
    for (const auto& m : family.tensors) {
      table.emplace_back(m.accel_name, m.shape);
      CHECK_FALSE(m.transposed);
      CHECK(m.hf_name == (m.accel_name == "lm_head.weight" ? m.accel_name : "model." + m.accel_name));
    }
    CHECK(table == names_and_shapes(s));
  }
}
