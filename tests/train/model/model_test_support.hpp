// Helpers shared by the model tests: small model sections, the built-in models as modules
// (GptModule, MlpModule), parameter lookup, and running the Python reference scripts of this
// directory with accel's Python environment (ACCEL_TEST_PYTHON). Include after
// tests/support/catch_with_torch.hpp.
#pragma once

#include <string>

#include "tests/support/run_command.hpp"
#include "trainer/models/builtin_module.hpp"

namespace accel::test {

inline config::ModelSection gpt_section(int n_layer = 2, int n_head = 2, int n_embd = 16, int vocab_size = 32,
                                        int block_size = 8) {
  config::ModelSection s;
  s.name = config::ModelName::gpt;
  s.n_layer = n_layer;
  s.n_head = n_head;
  s.n_embd = n_embd;
  s.vocab_size = vocab_size;
  s.block_size = block_size;
  return s;
}

inline config::ModelSection mlp_section(int n_layer = 3, int n_embd = 16, int vocab_size = 32) {
  config::ModelSection s = gpt_section(n_layer, 1, n_embd, vocab_size, 8);
  s.name = config::ModelName::mlp;
  return s;
}

// A small llama: grouped-query attention (n_kv_head 2 of 4 heads), SwiGLU width 24, rope_theta
// 500000, untied head unless `tied`; `biases` sets attention_bias and mlp_bias.
inline config::ModelSection llama_section(int n_layer = 2, bool tied = false, bool biases = false) {
  config::ModelSection s = gpt_section(n_layer, 4, 16, 32, 8);
  s.name = config::ModelName::llama;
  s.n_kv_head = 2;
  s.intermediate_size = 24;
  s.rope_theta = 500000.0;
  s.tie_word_embeddings = tied;
  s.attention_bias = s.mlp_bias = biases;
  return s;
}

inline at::Tensor parameter(const train::BuiltinModule& model, const std::string& name) {
  for (auto& [n, p] : model.spec_parameters())
    if (n == name) return p;
  throw std::out_of_range("no parameter " + name);
}

inline std::string model_test_dir() { return ACCEL_MODEL_TEST_DIR; }

// Runs `script` (a file of this directory) with `args` under Debian's Python.
inline CommandResult run_python_script(const std::string& script, const std::string& args) {
  // Appended piece by piece: GCC 12 misreads `std::string(literal) + ...` chains of long literals as
  // copies past a string's end (-Warray-bounds).
  std::string path = model_test_dir();
  path.append("/").append(script);
  std::string command = ACCEL_TEST_PYTHON;
  command.append(" ").append(shell_quote(path)).append(" ").append(args);
  return run_command(command);
}

}  // namespace accel::test
