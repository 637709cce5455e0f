// The shapes a model section must have before a built-in model is built from it or sized by the
// estimator (no torch). Validation (validate.cpp) normally reports these first, with the file's
// positions; this check is what a library caller or the estimator gets, a named key, not a crash.
#pragma once

#include "runtime/config/job.hpp"

namespace accel::config {

// Throws accel::ConfigError naming every key at fault: a non-positive dimension, or (gpt) n_embd
// not divisible by n_head.
void check_model_section(const ModelSection& section);

}  // namespace accel::config
