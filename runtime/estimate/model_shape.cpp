// Unit sizes of the built-in models (see model_shape.hpp).
#include "runtime/estimate/model_shape.hpp"

#include <numeric>

#include "runtime/common/errors.hpp"

namespace accel::estimate {
namespace {

void require_positive(std::vector<Diagnostic>& problems, const char* key, int value) {
  if (value <= 0) problems.push_back({key, {}, "must be positive", std::to_string(value), ">= 1", ""});
}

}  // namespace

int64_t ModelShape::num_parameters() const {
  return std::accumulate(units.begin(), units.end(), int64_t(0),
                         [](int64_t sum, const UnitShape& u) { return sum + u.numel; });
}

std::vector<int64_t> ModelShape::unit_numels() const {
  std::vector<int64_t> out;
  for (const auto& u : units) out.push_back(u.numel);
  return out;
}

ModelShape model_shape(const config::ModelSection& s) {
  std::vector<Diagnostic> problems;
  require_positive(problems, "model.n_layer", s.n_layer);
  require_positive(problems, "model.n_embd", s.n_embd);
  require_positive(problems, "model.vocab_size", s.vocab_size);
  if (s.name == config::ModelName::gpt) {
    require_positive(problems, "model.n_head", s.n_head);
    require_positive(problems, "model.block_size", s.block_size);
    if (s.n_head > 0 && s.n_embd > 0 && s.n_embd % s.n_head != 0)
      problems.push_back({"model.n_embd", {}, "must be divisible by model.n_head", std::to_string(s.n_embd),
                          "a multiple of " + std::to_string(s.n_head), ""});
  }
  if (!problems.empty()) throw ConfigError(std::move(problems));

  const int64_t C = s.n_embd, V = s.vocab_size, T = s.block_size;
  ModelShape shape;
  shape.tied_unit = 0;
  switch (s.name) {
    case config::ModelName::gpt: {
      shape.units.push_back({"embedding", V * C + T * C});  // wte, wpe
      // ln_1 (2C), c_attn (3C^2 + 3C), attn.c_proj (C^2 + C), ln_2 (2C), c_fc (4C^2 + 4C), mlp.c_proj (4C^2 + C)
      const int64_t block = 12 * C * C + 13 * C;
      for (int i = 0; i < s.n_layer; ++i) shape.units.push_back({"h." + std::to_string(i), block});
      shape.units.push_back({"final", 2 * C});  // ln_f
      return shape;
    }
    case config::ModelName::mlp: {
      shape.units.push_back({"embedding", V * C});  // wte only: no position table
      for (int i = 0; i < s.n_layer; ++i) shape.units.push_back({"layer." + std::to_string(i), C * C + C});
      return shape;
    }
  }
  throw ConfigError(Diagnostic{"model.name", {}, "unknown model", config::to_string(s.name), "gpt | mlp", ""});
}

std::string describe_model(const config::ModelSection& s) {
  std::string out = config::to_string(s.name) + " (n_layer " + std::to_string(s.n_layer);
  if (s.name == config::ModelName::gpt) out += ", n_head " + std::to_string(s.n_head);
  out += ", n_embd " + std::to_string(s.n_embd) + ", vocab_size " + std::to_string(s.vocab_size);
  if (s.name == config::ModelName::gpt) out += ", block_size " + std::to_string(s.block_size);
  return out + ")";
}

}  // namespace accel::estimate
