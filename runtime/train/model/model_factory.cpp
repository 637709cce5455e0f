// make_model: checks a model section and builds the model it names (declared in model.hpp).
// Config validation (runtime/config/validate.cpp) normally catches these first; the factory
// repeats the checks the model's shapes rely on, so a library caller gets a named key, not a crash.
#include <string>
#include <vector>

#include "runtime/common/errors.hpp"
#include "runtime/train/model/gpt_model.hpp"
#include "runtime/train/model/mlp_model.hpp"
#include "runtime/train/model/model.hpp"

namespace accel::train {

namespace {
void require_positive(std::vector<Diagnostic>& problems, const char* key, int value) {
  if (value <= 0) problems.push_back({key, {}, "must be positive", std::to_string(value), ">= 1", ""});
}
}  // namespace

void check_model_section(const config::ModelSection& section) {
  std::vector<Diagnostic> problems;
  require_positive(problems, "model.n_layer", section.n_layer);
  require_positive(problems, "model.n_embd", section.n_embd);
  require_positive(problems, "model.vocab_size", section.vocab_size);
  if (section.name == config::ModelName::gpt) {
    require_positive(problems, "model.n_head", section.n_head);
    require_positive(problems, "model.block_size", section.block_size);
    if (section.n_head > 0 && section.n_embd > 0 && section.n_embd % section.n_head != 0)
      problems.push_back({"model.n_embd", {}, "must be divisible by model.n_head", std::to_string(section.n_embd),
                          "a multiple of " + std::to_string(section.n_head), ""});
  }
  if (!problems.empty()) throw ConfigError(std::move(problems));
}

std::unique_ptr<Model> make_model(const config::ModelSection& section) {
  check_model_section(section);
  switch (section.name) {
    case config::ModelName::gpt: return std::make_unique<GptModel>(section);
    case config::ModelName::mlp: return std::make_unique<MlpModel>(section);
  }
  throw ConfigError(Diagnostic{"model.name", {}, "unknown model", config::to_string(section.name),
                               "gpt | mlp", ""});
}

}  // namespace accel::train
