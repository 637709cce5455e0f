// The built-in models' math on bare tensors (spec/training.md), shared by GptModule and MlpModule
// and the trainer's loss: the token embedding, the tied unembedding, the token cross-entropy, and
// the torch dtype of model.dtype.
#pragma once

#include <ATen/ATen.h>

#include "runtime/config/job.hpp"

namespace accel::train {

// idx [B, T] int64 -> wte[idx] (+ wpe[0..T) when `wpe` is defined). Throws std::invalid_argument
// for another shape or dtype, or T above the position table (block_size).
// `sparse_grad`: wte's gradient from this use is a sparse [tokens] x C tensor rather than a dense
// [V, C] one. Only for a table tied with the head, whose dense gradient autograd adds it into in
// place before it reaches .grad (an untied table would get a sparse .grad).
at::Tensor embed_tokens(const at::Tensor& wte, const at::Tensor& wpe, const at::Tensor& idx, bool sparse_grad = false);
// x [B, T, C] -> logits x @ wte^T (the head tied with the token table).
at::Tensor unembed_tokens(const at::Tensor& wte, const at::Tensor& x);

// Mean token cross-entropy of logits [B, T, V] against targets [B, T] int64, computed in fp32 (a
// 0-dim fp32 tensor). Global-batch scaling is the trainer's job.
at::Tensor token_cross_entropy(const at::Tensor& logits, const at::Tensor& targets);

// The torch dtype of a model.dtype value (fp32 -> Float, bf16 -> BFloat16).
at::ScalarType to_scalar_type(config::ParamDtype dtype);

}  // namespace accel::train
