// The model section's shape check (see model_section.hpp).
#include "runtime/config/model_section.hpp"

#include <string>
#include <vector>

#include "runtime/common/errors.hpp"

namespace accel::config {
namespace {

void require_positive(std::vector<Diagnostic>& problems, const char* key, int value) {
  if (value <= 0) problems.push_back({key, {}, "must be positive", std::to_string(value), ">= 1", ""});
}

}  // namespace

void check_model_section(const ModelSection& section) {
  std::vector<Diagnostic> problems;
  require_positive(problems, "model.n_layer", section.n_layer);
  require_positive(problems, "model.n_embd", section.n_embd);
  require_positive(problems, "model.vocab_size", section.vocab_size);
  if (section.name == ModelName::gpt) {
    require_positive(problems, "model.n_head", section.n_head);
    require_positive(problems, "model.block_size", section.block_size);
    if (section.n_head > 0 && section.n_embd > 0 && section.n_embd % section.n_head != 0)
      problems.push_back({"model.n_embd", {}, "must be divisible by model.n_head", std::to_string(section.n_embd),
                          "a multiple of " + std::to_string(section.n_head), ""});
  }
  if (!problems.empty()) throw ConfigError(std::move(problems));
}

}  // namespace accel::config
