// The built-in models' math on bare tensors (see builtin_ops.hpp).
#include "trainer/models/builtin_ops.hpp"

#include <stdexcept>
#include <string>

namespace accel::train {

at::Tensor embed_tokens(const at::Tensor& wte, const at::Tensor& wpe, const at::Tensor& idx,
                        const TiedTableGradientPtr& tied) {
  if (idx.dim() != 2 || idx.scalar_type() != at::kLong)
    throw std::invalid_argument("embedding: idx must be a [B, T] int64 tensor, got " + std::to_string(idx.dim()) +
                                " dims of " + std::string(c10::toString(idx.scalar_type())));
  at::Tensor x = tied ? tied_table_lookup(wte, idx, tied) : at::embedding(wte, idx);
  if (!wpe.defined()) return x;
  const int64_t seq_len = idx.size(1);
  const int64_t block_size = wpe.size(0);
  if (seq_len > block_size)
    throw std::invalid_argument("embedding: sequence length " + std::to_string(seq_len) +
                                " exceeds the position table (block_size " + std::to_string(block_size) + ")");
  return x + wpe.narrow(0, 0, seq_len);  // [T, C] broadcasts over the batch
}

at::Tensor unembed_tokens(const at::Tensor& wte, const at::Tensor& x) { return at::linear(x, wte); }

at::Tensor token_cross_entropy(const at::Tensor& logits, const at::Tensor& targets) {
  if (logits.dim() != 3 || targets.dim() != 2 || logits.size(0) != targets.size(0) ||
      logits.size(1) != targets.size(1))
    throw std::invalid_argument("loss: expected logits [B, T, V] and targets [B, T], got " +
                                std::to_string(logits.dim()) + "-d logits and " + std::to_string(targets.dim()) +
                                "-d targets of mismatched sizes");
  if (targets.scalar_type() != at::kLong) throw std::invalid_argument("loss: targets must be int64");
  const int64_t vocab = logits.size(2);
  return at::cross_entropy_loss(logits.reshape({-1, vocab}).to(at::kFloat), targets.reshape({-1}));
}

at::ScalarType to_scalar_type(config::ParamDtype dtype) {
  switch (dtype) {
    case config::ParamDtype::fp32: return at::kFloat;
    case config::ParamDtype::bf16: return at::kBFloat16;
  }
  throw std::invalid_argument("unknown model dtype");
}

}  // namespace accel::train
