// The model section's shape check (see model_section.hpp).
#include "runtime/config/model_section.hpp"

#include <string>
#include <vector>

namespace accel::config {
namespace {

void require_positive(std::vector<Diagnostic>& problems, const char* key, int value) {
  if (value <= 0) problems.push_back({key, {}, "must be positive", std::to_string(value), ">= 1", ""});
}

std::string number(double v) {
  std::string s = std::to_string(v);
  while (s.size() > 1 && s.back() == '0') s.pop_back();
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s;
}

}  // namespace

int llama_kv_heads(const ModelSection& s) { return s.n_kv_head > 0 ? s.n_kv_head : s.n_head; }
int llama_head_dim(const ModelSection& s) {
  return s.head_dim > 0 ? s.head_dim : (s.n_head > 0 ? s.n_embd / s.n_head : 0);
}
int llama_intermediate_size(const ModelSection& s) {
  return s.intermediate_size > 0 ? s.intermediate_size : 4 * s.n_embd;
}

std::vector<Diagnostic> llama_problems(const ModelSection& s) {
  std::vector<Diagnostic> problems;
  if (s.name != ModelName::llama || s.n_head <= 0 || s.n_embd <= 0) return problems;
  const int kv = llama_kv_heads(s);
  if (s.n_kv_head < 0 || kv > s.n_head || s.n_head % kv != 0)
    problems.push_back({"model.n_kv_head", {}, "must divide model.n_head (each key/value head serves n_head / "
                        "n_kv_head query heads)", std::to_string(s.n_kv_head),
                        "a divisor of " + std::to_string(s.n_head) + ", or 0 for n_head", ""});
  if (s.head_dim == 0 && s.n_embd % s.n_head != 0)
    problems.push_back({"model.n_embd", {}, "must be divisible by model.n_head when model.head_dim is 0 (derived)",
                        std::to_string(s.n_embd), "a multiple of " + std::to_string(s.n_head),
                        "or set model.head_dim"});
  const int head_dim = llama_head_dim(s);
  if (head_dim <= 0 || head_dim % 2 != 0)
    problems.push_back({"model.head_dim", {}, "must be even (RoPE rotates the two halves of each head's channels)",
                        std::to_string(head_dim), "a positive even integer, or 0 for n_embd / n_head", ""});
  if (!(s.rope_theta > 0))
    problems.push_back({"model.rope_theta", {}, "must be positive", number(s.rope_theta), "> 0", ""});
  if (s.norm_eps < 0)
    problems.push_back({"model.norm_eps", {}, "must not be negative", number(s.norm_eps), ">= 0", ""});
  if (s.rope_scaling == RopeScaling::llama3) {
    if (!(s.rope_scaling_high_freq_factor > s.rope_scaling_low_freq_factor) || !(s.rope_scaling_low_freq_factor > 0))
      problems.push_back({"model.rope_scaling_high_freq_factor", {}, "must be above model.rope_scaling_low_freq_factor "
                          "(llama3 scaling divides by their difference), both positive",
                          number(s.rope_scaling_high_freq_factor),
                          "> " + number(s.rope_scaling_low_freq_factor), "Llama 3.1 uses 1 and 4"});
    if (!(s.rope_scaling_factor >= 1))
      problems.push_back({"model.rope_scaling_factor", {}, "must be at least 1", number(s.rope_scaling_factor), ">= 1",
                          ""});
    if (s.rope_scaling_original_max_position_embeddings <= 0)
      problems.push_back({"model.rope_scaling_original_max_position_embeddings", {}, "must be positive",
                          std::to_string(s.rope_scaling_original_max_position_embeddings), ">= 1", ""});
  }
  if (s.sliding_window < 0)
    problems.push_back({"model.sliding_window", {}, "must not be negative", std::to_string(s.sliding_window),
                        "0 (none) or a span >= training.seq_len", ""});
  return problems;
}

void check_model_section(const ModelSection& section) {
  std::vector<Diagnostic> problems;
  require_positive(problems, "model.n_layer", section.n_layer);
  require_positive(problems, "model.n_embd", section.n_embd);
  require_positive(problems, "model.vocab_size", section.vocab_size);
  if (section.name == ModelName::gpt || section.name == ModelName::llama) {
    require_positive(problems, "model.n_head", section.n_head);
    require_positive(problems, "model.block_size", section.block_size);
  }
  if (section.name == ModelName::gpt && section.n_head > 0 && section.n_embd > 0 &&
      section.n_embd % section.n_head != 0)
    problems.push_back({"model.n_embd", {}, "must be divisible by model.n_head", std::to_string(section.n_embd),
                        "a multiple of " + std::to_string(section.n_head), ""});
  for (auto& p : llama_problems(section)) problems.push_back(std::move(p));
  if (!problems.empty()) throw ConfigError(std::move(problems));
}

}  // namespace accel::config
