// The `embedding` unit: the token table wte [vocab, n_embd] and, for gpt, the position table
// wpe [block_size, n_embd]. It is used twice per forward: embed(idx) at the start and
// unembed(x) = x @ wte^T at the end (tied weights, one owner). Invariant: parameters are listed
// as wte.weight then wpe.weight (when present), the spec order.
#pragma once

#include <cstdint>
#include <memory>

#include "runtime/train/model/layers.hpp"
#include "runtime/train/model/unit.hpp"

namespace accel::train {

// The embedding's math on bare tensors, shared with the built-in models as modules
// (runtime/train/modules): idx [B, T] int64 -> wte[idx] (+ wpe[0..T) when `wpe` is defined).
at::Tensor embed_tokens(const at::Tensor& wte, const at::Tensor& wpe, const at::Tensor& idx);
// x [B, T, C] -> logits x @ wte^T.
at::Tensor unembed_tokens(const at::Tensor& wte, const at::Tensor& x);

class EmbeddingUnit : public Unit {
 public:
  // block_size 0: no position table (the mlp model).
  EmbeddingUnit(int64_t vocab_size, int64_t n_embd, int64_t block_size, at::ScalarType dtype);

  // idx [B, T] int64 -> [B, T, n_embd]: wte[idx] (+ wpe[0..T) when there is a position table).
  at::Tensor embed(const at::Tensor& idx) const;
  // x [B, T, n_embd] -> logits [B, T, vocab]: x @ wte^T.
  at::Tensor unembed(const at::Tensor& x) const;

  bool has_positions() const { return wpe_ != nullptr; }

 private:
  std::shared_ptr<TableLayer> wte_;
  std::shared_ptr<TableLayer> wpe_;  // null without a position table
};

}  // namespace accel::train
