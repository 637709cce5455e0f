// The `embedding` unit (see embedding_unit.hpp).
#include "runtime/train/model/embedding_unit.hpp"

#include <stdexcept>
#include <string>

#include <ATen/ATen.h>

namespace accel::train {

EmbeddingUnit::EmbeddingUnit(int64_t vocab_size, int64_t n_embd, int64_t block_size, at::ScalarType dtype)
    : Unit("embedding", "") {
  wte_ = register_module("wte", std::make_shared<TableLayer>(vocab_size, n_embd, dtype));
  if (block_size > 0) wpe_ = register_module("wpe", std::make_shared<TableLayer>(block_size, n_embd, dtype));
}

at::Tensor embed_tokens(const at::Tensor& wte, const at::Tensor& wpe, const at::Tensor& idx) {
  if (idx.dim() != 2 || idx.scalar_type() != at::kLong)
    throw std::invalid_argument("embedding: idx must be a [B, T] int64 tensor, got " + std::to_string(idx.dim()) +
                                " dims of " + std::string(c10::toString(idx.scalar_type())));
  at::Tensor x = at::embedding(wte, idx);
  if (!wpe.defined()) return x;
  const int64_t seq_len = idx.size(1);
  const int64_t block_size = wpe.size(0);
  if (seq_len > block_size)
    throw std::invalid_argument("embedding: sequence length " + std::to_string(seq_len) +
                                " exceeds the position table (block_size " + std::to_string(block_size) + ")");
  return x + wpe.narrow(0, 0, seq_len);  // [T, C] broadcasts over the batch
}

at::Tensor unembed_tokens(const at::Tensor& wte, const at::Tensor& x) { return at::linear(x, wte); }

at::Tensor EmbeddingUnit::embed(const at::Tensor& idx) const {
  return embed_tokens(wte_->weight, wpe_ ? wpe_->weight : at::Tensor(), idx);
}

at::Tensor EmbeddingUnit::unembed(const at::Tensor& x) const { return unembed_tokens(wte_->weight, x); }

}  // namespace accel::train
