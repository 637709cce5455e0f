// Seeded initialisation per spec/training.md, reproducible by an independent implementation.
//
// Rules, by spec name: "*.bias" -> 0; norm weights (gpt's "ln_1", "ln_2", "ln_f"; llama's
// "input_layernorm", "post_attention_layernorm", "norm") -> 1; every "*c_proj.weight" (gpt) ->
// N(0, 0.02 / sqrt(2 * n_layer)); every other weight (Linear, wte, wpe, layer.{i}, llama's
// embed_tokens, projections and lm_head) -> N(0, 0.02). llama's rule is transformers' own
// LlamaPreTrainedModel init with initializer_range 0.02 (no depth-scaled projection).
//
// RNG order (the contract): one torch CPU generator (mt19937) seeded with `seed` (like
// torch.Generator().manual_seed(seed); mt19937 keeps only the low 32 bits of the seed). Parameters
// are visited in spec order (BuiltinModule::spec_parameters()); each normal-initialised parameter draws
// its whole tensor at once, in float64, as
//     torch.empty(shape, dtype=torch.float64).normal_(0, std, generator=g)
// then the draw is rounded to float32 and then to the parameter's dtype (bf16 rounds from the
// float32 value). Constant-initialised parameters (biases, LayerNorm) draw nothing. Drawing in
// float64 avoids torch's CPU-capability-specific vectorised float32 path, so the same seed gives
// the same weights on any x86 machine with this torch. The global torch RNG is never touched.
#pragma once

#include <cstdint>
#include <string>

#include "engine/named_tensors.hpp"

namespace accel::train {

struct InitRule {
  enum class Kind { normal, zeros, ones };
  Kind kind = Kind::zeros;
  double std = 0.0;  // for normal
};

constexpr double kInitStd = 0.02;

// The rule for one parameter; throws std::invalid_argument for a name no rule covers.
InitRule spec_init_rule(const std::string& spec_name, int n_layer);

// Initialises `parameters` (spec order) in place, drawing as documented above.
void initialize_in_spec_order(const engine::NamedTensors& parameters, int n_layer, uint64_t seed);

}  // namespace accel::train
