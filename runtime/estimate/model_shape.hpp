// The built-in models' unit sizes from their dimensions, without building them (no torch), for the
// memory estimator: the units the trainer's engine runs, as api::apply_unit_policy makes them of
// GptModule and MlpModule (trainer/models; parameters per spec/training.md):
//   gpt: `root` (wte [V, C], wpe [T, C], ln_f 2C), then `h.0` .. `h.{L-1}` (12C^2 + 13C each);
//   mlp: `root` (wte [V, C]), then `layer.0` .. `layer.{L-1}` (C^2 + C each);
//   llama: `root` (embed_tokens [V, C], lm_head [V, C] unless tied, norm C), then `layers.0` ..
//   (2*H*D*C + 2*KV*D*C + 3*I*C + 2C each, plus the bias flags' biases).
// Under fsdp SIZE_BASED_WRAP each module outside the layers (wte, wpe, ln_f) holding at least
// min_num_params parameters is a unit of its own, named by its path; the root keeps the others and
// is left out when it keeps none.
// Invariant: units are in the policy's order (the root, then by first parameter in spec order) and
// their numels equal the parameter counts of the units apply_unit_policy makes (pinned by
// tests/train/model/test_model_shape.cpp against the modules, under every wrap policy).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/config/job.hpp"

namespace accel::estimate {

struct UnitShape {
  std::string name;   // "root", "h.0", "layer.2", "wte"
  int64_t numel = 0;  // parameters of the unit
};

struct ModelShape {
  std::vector<UnitShape> units;  // the policy's order: the root first
  // The unit holding wte (llama: embed_tokens), whose weights are tied with the output head: used at both ends of the
  // forward, so the engine keeps it gathered through a step. -1: none.
  int tied_unit = -1;

  int64_t num_parameters() const;
  std::vector<int64_t> unit_numels() const;
};

// The units under `wrap` (fsdp.auto_wrap_policy; only SIZE_BASED_WRAP, with `min_num_params`,
// changes them: other backends and policies make the root and the layers). Throws
// accel::ConfigError naming the model key for a non-positive dimension or n_embd not divisible by
// n_head (gpt).
ModelShape model_shape(const config::ModelSection& section,
                       config::AutoWrapPolicy wrap = config::AutoWrapPolicy::TRANSFORMER_BASED_WRAP,
                       int64_t min_num_params = 0);

// "gpt (n_layer 4, n_head 4, n_embd 128, vocab_size 256, block_size 128)"
std::string describe_model(const config::ModelSection& section);

}  // namespace accel::estimate
