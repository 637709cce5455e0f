// The memory estimator's llama parameter count (runtime/estimate/model_shape.cpp) against the
// published counts of real checkpoints' shapes (their config.json values; the counts are what
// transformers' model.num_parameters() reports for them): exact, so every projection, the GQA
// widths, the norms and the (un)tied head are each counted once.
#include <catch2/catch.hpp>

#include "runtime/common/errors.hpp"
#include "runtime/estimate/model_shape.hpp"

using accel::config::ModelName;
using accel::config::ModelSection;

namespace {

ModelSection llama(int layers, int hidden, int heads, int kv_heads, int intermediate, int vocab, bool tied) {
  ModelSection s;
  s.name = ModelName::llama;
  s.n_layer = layers;
  s.n_embd = hidden;
  s.n_head = heads;
  s.n_kv_head = kv_heads;
  s.intermediate_size = intermediate;
  s.vocab_size = vocab;
  s.block_size = 4096;
  s.tie_word_embeddings = tied;
  return s;
}

}  // namespace

TEST_CASE("llama parameter counts equal the published checkpoints' counts", "[estimate][llama]") {
  using accel::estimate::model_shape;
  // TinyLlama-1.1B: 22 layers, 2048 wide, 32 heads, 4 key/value heads, SwiGLU 5632, vocab 32000.
  CHECK(model_shape(llama(22, 2048, 32, 4, 5632, 32000, false)).num_parameters() == 1'100'048'384);
  // Llama-2-7B: multi-head (32 of 32), SwiGLU 11008.
  CHECK(model_shape(llama(32, 4096, 32, 32, 11008, 32000, false)).num_parameters() == 6'738'415'616);
  // Mistral-7B-v0.1: 8 key/value heads, SwiGLU 14336.
  CHECK(model_shape(llama(32, 4096, 32, 8, 14336, 32000, false)).num_parameters() == 7'241'732'096);
  // Llama-3-8B: Mistral's body with a 128256-token vocabulary.
  CHECK(model_shape(llama(32, 4096, 32, 8, 14336, 128256, false)).num_parameters() == 8'030'261'248);
  // Llama-3.2-1B: tied head (no lm_head parameters).
  CHECK(model_shape(llama(16, 2048, 32, 8, 8192, 128256, true)).num_parameters() == 1'235'814'400);
}

TEST_CASE("llama units: the root holds embed_tokens, norm and lm_head; one unit per decoder layer", "[estimate][llama]") {
  auto s = llama(2, 16, 4, 2, 24, 32, false);
  s.attention_bias = true;  // q 16 + k 8 + v 8 + o 16 biases
  s.mlp_bias = true;        // gate 24 + up 24 + down 16 biases
  const auto shape = accel::estimate::model_shape(s);
  REQUIRE(shape.units.size() == 3);
  CHECK(shape.units[0].name == "root");
  CHECK(shape.units[0].numel == 32 * 16 + 16 + 32 * 16);
  CHECK(shape.units[1].name == "layers.0");
  // q [16,16] k [8,16] v [8,16] o [16,16], gate/up [24,16], down [16,24], two norms, the biases.
  CHECK(shape.units[1].numel == 256 + 128 + 128 + 256 + 3 * 384 + 32 + 48 + 64);
  CHECK(shape.tied_unit == 0);
}

TEST_CASE("llama shapes the estimator cannot size are refused naming the key", "[estimate][llama]") {
  auto s = llama(2, 16, 4, 3, 24, 32, false);  // 3 key/value heads do not divide 4 heads
  CHECK_THROWS_WITH(accel::estimate::model_shape(s), Catch::Contains("model.n_kv_head"));
  s = llama(2, 16, 4, 2, 24, 32, false);
  s.head_dim = 5;  // RoPE needs pairs
  CHECK_THROWS_WITH(accel::estimate::model_shape(s), Catch::Contains("model.head_dim"));
  s = llama(2, 18, 4, 2, 24, 32, false);  // 18 / 4 heads, head_dim derived
  CHECK_THROWS_WITH(accel::estimate::model_shape(s), Catch::Contains("model.n_embd"));
  s.head_dim = 8;  // an explicit head_dim frees n_embd from n_head (as Mistral Nemo's)
  CHECK_NOTHROW(accel::estimate::model_shape(s));
  s.rope_scaling = accel::config::RopeScaling::llama3;
  s.rope_scaling_low_freq_factor = 4;
  s.rope_scaling_high_freq_factor = 4;
  CHECK_THROWS_WITH(accel::estimate::model_shape(s), Catch::Contains("model.rope_scaling_high_freq_factor"));
}
