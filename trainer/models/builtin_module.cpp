// The built-in models as modules: spec parameters, init and the factory (see builtin_module.hpp).
#include "trainer/models/builtin_module.hpp"

#include "runtime/common/errors.hpp"
#include "runtime/config/model_section.hpp"
#include "trainer/models/builtin_ops.hpp"
#include "trainer/models/gpt_module.hpp"
#include "trainer/models/llama_module.hpp"
#include "trainer/models/mlp_module.hpp"
#include "trainer/models/spec_init.hpp"

namespace accel::train {

engine::NamedTensors BuiltinModule::spec_parameters() const {
  engine::NamedTensors out;
  for (const auto& p : named_parameters(/*recurse=*/true)) out.emplace_back(p.key(), p.value());
  return out;
}

at::Tensor BuiltinModule::forward(const at::Tensor& idx) {
  return unembed_tokens(head_weight(), hidden_states(idx, /*tied=*/{}));
}

at::Tensor BuiltinModule::loss(const at::Tensor& idx, const at::Tensor& targets, int64_t chunk_tokens,
                               double gradient_scale) {
  if (chunk_tokens == 0) return token_cross_entropy(forward(idx), targets);
  const TiedTableGradientPtr tied = ties_head() ? c10::make_intrusive<TiedTableGradient>() : TiedTableGradientPtr();
  return chunked_token_cross_entropy(hidden_states(idx, tied), head_weight(), targets,
                                     ChunkedLossOptions{chunk_tokens, gradient_scale, tied});
}

void BuiltinModule::initialize(uint64_t seed) { initialize_in_spec_order(spec_parameters(), n_layer_, seed); }

std::shared_ptr<BuiltinModule> make_builtin_module(const config::ModelSection& section) {
  config::check_model_section(section);
  switch (section.name) {
    case config::ModelName::gpt: return std::make_shared<GptModule>(section);
    case config::ModelName::mlp: return std::make_shared<MlpModule>(section);
    case config::ModelName::llama: return std::make_shared<LlamaModule>(section);
  }
  throw ConfigError(Diagnostic{"model.name", {}, "unknown model", config::to_string(section.name), "gpt | llama | mlp", ""});
}

}  // namespace accel::train
