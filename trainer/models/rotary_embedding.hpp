// Rotary position embedding (RoPE) as transformers' Llama computes it, in the rotate_half
// convention: channel i of a head pairs with channel i + head_dim/2 (not Meta's interleaved pairs).
// The frequencies are float32 inv_freq[j] = 1 / theta^(2j / head_dim), optionally rescaled by Llama
// 3.1's rule (rope_type llama3); the tables are cos/sin of position * inv_freq, each frequency twice
// ([T, head_dim]), in float32 until they meet q and k (then rounded to their dtype, as transformers
// rounds them to the hidden states' dtype). Every step mirrors transformers' ops and their order, so
// fp32 tables equal transformers' bit for bit on the same machine.
#pragma once

#include <cstdint>

#include <ATen/ATen.h>

#include "runtime/config/job.hpp"

namespace accel::train {

// inv_freq [head_dim / 2] float32 for `section`'s rope_theta and rope_scaling.
at::Tensor rope_inverse_frequencies(const config::ModelSection& section, int64_t head_dim);

// cos and sin tables [seq_len, head_dim] float32 for positions 0 .. seq_len-1 on `device`.
struct RopeTables {
  at::Tensor cos, sin;
};
RopeTables rope_tables(const at::Tensor& inv_freq, int64_t seq_len, at::Device device);

// x [B, heads, T, head_dim] rotated: x * cos + rotate_half(x) * sin, the tables in x's dtype.
at::Tensor apply_rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

}  // namespace accel::train
