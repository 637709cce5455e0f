// The built-in models' unit sizes from their dimensions, without building them (no torch), for the
// memory estimator. Units and their parameters follow spec/training.md and runtime/train/model:
//   gpt: `embedding` (wte [V, C], wpe [T, C]), `h.0` .. `h.{L-1}` (12C^2 + 13C each), `final` (ln_f, 2C);
//   mlp: `embedding` (wte [V, C]), `layer.0` .. `layer.{L-1}` (C^2 + C each).
// Invariant: units are in the model's forward order and their numels equal the parameter counts of
// the units make_model builds (pinned by tests/train/model/test_model_shape.cpp against the torch model).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/config/job.hpp"

namespace accel::estimate {

struct UnitShape {
  std::string name;   // "embedding", "h.0", "final", "layer.2"
  int64_t numel = 0;  // parameters of the unit
};

struct ModelShape {
  std::vector<UnitShape> units;  // forward order
  // The unit whose weights are tied with the output head (`embedding`): a sharding backend keeps
  // it gathered through a step, because it is used at both ends of the forward. -1: none.
  int tied_unit = -1;

  int64_t num_parameters() const;
  std::vector<int64_t> unit_numels() const;
};

// Throws accel::ConfigError naming the model key for a non-positive dimension or n_embd not
// divisible by n_head (gpt).
ModelShape model_shape(const config::ModelSection& section);

// "gpt (n_layer 4, n_head 4, n_embd 128, vocab_size 256, block_size 128)"
std::string describe_model(const config::ModelSection& section);

}  // namespace accel::estimate
