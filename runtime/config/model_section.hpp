// The shapes a model section must have before a built-in model is built from it or sized by the
// estimator (no torch). Validation (validate.cpp) normally reports these first, with the file's
// positions; this check is what a library caller or the estimator gets, a named key, not a crash.
#pragma once

#include <vector>

#include "runtime/common/errors.hpp"
#include "runtime/config/job.hpp"

namespace accel::config {

// Throws accel::ConfigError naming every key at fault: a non-positive dimension, (gpt) n_embd not
// divisible by n_head, or one of llama_problems.
void check_model_section(const ModelSection& section);

// The llama section's cross-key rules (no locations: validate.cpp adds the file's): n_head a
// multiple of n_kv_head, head_dim even and (when derived) n_embd divisible by n_head, rope_theta
// positive, llama3 scaling with high_freq_factor above low_freq_factor. Empty for another model.
std::vector<Diagnostic> llama_problems(const ModelSection& section);

// llama's sizes with their defaults resolved (0 in the section: derived, job.hpp).
int llama_kv_heads(const ModelSection& section);
int llama_head_dim(const ModelSection& section);
int llama_intermediate_size(const ModelSection& section);

}  // namespace accel::config
