// The built-in models' math on bare tensors (spec/training.md), shared by GptModule and MlpModule
// and the trainer's loss: the token embedding, the tied unembedding, the token cross-entropy, and
// the torch dtype of model.dtype.
#pragma once

#include <ATen/ATen.h>

#include "runtime/config/job.hpp"
#include "trainer/models/tied_table_gradient.hpp"

namespace accel::train {

// idx [B, T] int64 -> wte[idx] (+ wpe[0..T) when `wpe` is defined). Throws std::invalid_argument
// for another shape or dtype, or T above the position table (block_size).
// `tied` (a table tied with the chunked loss's head): the lookup adds its gradient into the head's
// (tied_table_lookup) instead of making a [V, C] one of its own.
at::Tensor embed_tokens(const at::Tensor& wte, const at::Tensor& wpe, const at::Tensor& idx,
                        const TiedTableGradientPtr& tied = {});
// x [B, T, C] -> logits x @ wte^T (the head tied with the token table).
at::Tensor unembed_tokens(const at::Tensor& wte, const at::Tensor& x);

// Mean token cross-entropy of logits [B, T, V] against targets [B, T] int64, computed in fp32 (a
// 0-dim fp32 tensor). Global-batch scaling is the trainer's job.
at::Tensor token_cross_entropy(const at::Tensor& logits, const at::Tensor& targets);

// The torch dtype of a model.dtype value (fp32 -> Float, bf16 -> BFloat16).
at::ScalarType to_scalar_type(config::ParamDtype dtype);

}  // namespace accel::train
