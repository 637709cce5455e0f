// The vocabulary head and the mean token cross-entropy in one pass over token chunks, so that no
// [tokens, vocab] tensor exists: at most one chunk's [chunk, vocab] logits (in the weight's dtype and
// in fp32) is alive at a time, in forward and backward (issue 51 item 3; docs/models.md, "The loss
// over the vocabulary").
//
// Design (llm.c's fused classifier, Liger's fused linear cross-entropy): the forward computes, chunk
// by chunk, the loss and, when a gradient is wanted, the gradients with respect to the hidden states
// and the head weight; it keeps only those two ([tokens, C] and [V, C], the size of its inputs) and
// the backward scales them by the incoming gradient. Recomputing each chunk's logits in backward
// instead would keep nothing but cost one more [tokens x C x V] matmul, a quarter of the head's
// work, for the same peak (the [V, C] gradient is alive from the head to the tied embedding's
// backward either way).
// Precision: logits are formed in the weight's dtype (bf16 under mixed precision, as the plain path's
// head), the softmax, the loss and the logits' gradient in fp32; that gradient is cast to the weight's
// dtype for the two gradient matmuls, as the plain path casts it back through its fp32 copy.
// `gradient_scale` is the factor the caller's backward will bring (the fp16 loss scale over the
// accumulation steps): the logits' gradient is multiplied by it in fp32 before the cast, so fp16 keeps
// its range as under the plain path; the backward divides it out again, so a wrong guess changes
// rounding only, never the result's value. 1 is right for fp32 and bf16.
// Invariants: the loss equals token_cross_entropy(hidden @ weight^T, targets) and the gradients equal
// the plain path's, up to fp32 summation order (and bf16 rounding of the [V, C] gradient once per
// chunk, where the plain path rounds once); targets lie in [0, V) (no ignore index); the backward
// runs once (no retain_graph).
#pragma once

#include <cstdint>

#include <ATen/ATen.h>

#include "trainer/models/tied_table_gradient.hpp"

namespace accel::train {

struct ChunkedLossOptions {
  int64_t chunk_tokens = 4096;  // rows of [chunk, V] logits formed at once; > 0
  double gradient_scale = 1.0;  // the incoming gradient backward is expected to get (see above); > 0
  // The head is the token table, looked up through tied_table_lookup with this slot: the head's
  // gradient is left there for the lookup to add its rows into (tied_table_gradient.hpp).
  TiedTableGradientPtr tied_table;
};

// hidden [B, T, C] (the final norm's output), weight [V, C] (the head's, or the token table when
// tied), targets [B, T] int64 -> the mean token cross-entropy, a 0-dim fp32 tensor. Throws
// std::invalid_argument for mismatched shapes or dtypes, or options out of range.
at::Tensor chunked_token_cross_entropy(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& targets,
                                       const ChunkedLossOptions& options);

}  // namespace accel::train
