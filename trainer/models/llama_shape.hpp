// The llama family's sizes and options, resolved from the job's model section (0s derived as
// job.hpp documents) and shared by its modules: the decoder layer, attention, MLP and RoPE.
#pragma once

#include <cstdint>

#include <ATen/ATen.h>

#include "runtime/config/job.hpp"

namespace accel::train {

struct LlamaShape {
  int64_t n_embd = 0, n_head = 0, n_kv_head = 0, head_dim = 0, intermediate_size = 0;
  double norm_eps = 1e-5;
  bool attention_bias = false, mlp_bias = false;
  at::ScalarType dtype = at::kFloat;

  // Resolves `section` (llama; checked by config::check_model_section first).
  static LlamaShape of(const config::ModelSection& section);
};

}  // namespace accel::train
